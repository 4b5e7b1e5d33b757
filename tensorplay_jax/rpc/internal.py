"""Internal API of the RPC layer for the sibling folders of ``tensorplay_jax`` (not for users).

Like torch's ``torch/distributed/rpc/internal.py``: the one module through
which other folders of the package (today ``distributed/autograd``; the same
for ``distributed/nn``, ``distributed/optim``, ``demo``) reach what the RPC
layer keeps in private modules. Nothing outside ``rpc/`` imports ``rpc._*``
(``run.py``'s launch imports move with the launch code); add a name here
instead. User code takes the public names of
``tensorplay_jax.rpc`` (or ``tensorplay_jax.distributed.rpc``); what is here
may change without notice.

The dependency runs one way: the packages that plug into RPC import it, the
RPC layer imports none of them. A plug-in registers its hooks and wire types
when it is imported; ``tensorplay_jax/__init__.py`` imports the ones every
worker needs (distributed autograd), so they are in place before a worker's
first RPC, whatever that worker imported itself.

What is here:

* hooks on every call (see ``_call_hooks``): :class:`CallInfo`,
  :class:`RpcHooks`, :func:`register_hooks`, :func:`call_metadata`,
  :func:`current_call_metadata`, :func:`current_caller`;
* the mark of a package's own RPC targets: :func:`internal_target`,
  :func:`is_internal_target` (hooks test ``info.func`` with it);
* wire types: :func:`register_type`;
* ``RRef.backward``'s implementation: :func:`register_rref_backward`
  (distributed autograd's);
* a dynamic group's removals: :func:`on_worker_gone` (distributed autograd
  fails the contexts a worker that left or died took part in);
* errors: :func:`not_initialized` (the "RPC has not been initialized" error,
  worded the same for every caller);
* bookkeeping messages that must not be lost: :func:`with_retries` (sends again
  when the message did not reach its peer, as tensorplay retries its RRef and
  autograd-cleanup messages; distributed autograd's context releases);
* backends (``rpc.backend_registry``): :class:`Agent`, what a backend's handler
  returns, with its ``outgoing`` filter, which sees each request as an
  :class:`Outgoing` (``distributed/rpc/_testing``'s fault injection);
* a stand-in agent for one thread (see ``_current``): :func:`agent_for_this_thread`,
  :func:`current_agent`, :func:`calls_run_here`, and the request kinds an
  agent's ``call`` serves (``CALL``, ``REMOTE``, ``FETCH``, ``FORK_ADD``,
  ``FORK_DEL``): ``testing.in_process_rpc``'s agent.

Example:
    >>> from tensorplay_jax.rpc import internal
    >>> @internal.internal_target
    ... def _ping():
    ...     return "pong"
    >>> internal.is_internal_target(_ping)
    True
    >>> str(internal.not_initialized("my_fn")).split(".")[0]
    'RPC has not been initialized (my_fn)'
"""

from tensorplay_jax.rpc import _call_hooks
from tensorplay_jax.rpc._agent import Agent as Agent
from tensorplay_jax.rpc._agent import Outgoing as Outgoing
from tensorplay_jax.rpc._call_hooks import CallInfo as CallInfo
from tensorplay_jax.rpc._call_hooks import RpcHooks as RpcHooks
from tensorplay_jax.rpc._call_hooks import call_metadata as call_metadata
from tensorplay_jax.rpc._call_hooks import current_call_metadata as current_call_metadata
from tensorplay_jax.rpc._call_hooks import current_caller as current_caller
from tensorplay_jax.rpc._call_hooks import internal_target as internal_target
from tensorplay_jax.rpc._call_hooks import is_internal_target as is_internal_target
from tensorplay_jax.rpc._call_hooks import register_hooks as register_hooks
from tensorplay_jax.rpc._codec import register_type as register_type
from tensorplay_jax.rpc._current import agent_for_this_thread as agent_for_this_thread
from tensorplay_jax.rpc._current import calls_run_here as calls_run_here
from tensorplay_jax.rpc._current import current_agent as current_agent
from tensorplay_jax.rpc._errors import not_initialized as not_initialized
from tensorplay_jax.rpc._membership import on_worker_gone as on_worker_gone
from tensorplay_jax.rpc._protocol import CALL as CALL
from tensorplay_jax.rpc._protocol import FETCH as FETCH
from tensorplay_jax.rpc._protocol import FORK_ADD as FORK_ADD
from tensorplay_jax.rpc._protocol import FORK_DEL as FORK_DEL
from tensorplay_jax.rpc._protocol import PING as PING
from tensorplay_jax.rpc._protocol import REMOTE as REMOTE
from tensorplay_jax.rpc._retries import with_retries as with_retries
from tensorplay_jax.rpc._rref import register_backward as register_rref_backward

# The hooks API is listed once, in ``_call_hooks.__all__``.
__all__ = [
    *_call_hooks.__all__,
    "CALL",
    "FETCH",
    "FORK_ADD",
    "FORK_DEL",
    "PING",
    "REMOTE",
    "Agent",
    "Outgoing",
    "agent_for_this_thread",
    "calls_run_here",
    "current_agent",
    "not_initialized",
    "on_worker_gone",
    "register_rref_backward",
    "register_type",
    "with_retries",
]
