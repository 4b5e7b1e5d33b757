"""Distributed autograd over RPC: context, backward, get_gradients (docs/design.md §4).

Inside ``with context() as context_id``, every RPC, ``remote()`` and
``to_here()`` carries the id; Tensors that require grad and cross the wire
get a send edge on the sender and a recv node on the receiver, keyed by
(context id, message). ``backward(context_id, [loss])`` runs each worker's
local tape and hands cotangents back across those edges until every worker
is done; leaf gradients accumulate in the context on the leaf's owner
(``get_gradients(context_id)`` there). Leaving the block releases the
context on every worker it reached.

Functional mode: ``differentiable_rpc(to, func, args)`` is an RPC that
``jax.grad``/``jax.vjp``/``jax.value_and_grad`` differentiate, under ``jit``
and ``vmap`` too (a ``custom_vjp``): a plain JAX function by default (the
callee keeps its VJP), or tape code with ``mode="tape"`` over the machinery
below (``context_id=``, with ``context_id_array`` under ``jit``, names the
context its remote leaves' gradients go to).

Semantics worth knowing (see ``_engine`` and ``_sendrecv``):

* Each gradient that arrives at a worker runs that worker's tape from the
  matching send edge (tensorplay's "FAST mode"): a local subgraph shared by
  two sent Tensors runs once per arrival (gradients are still exact), and a
  recv node no gradient reaches sends nothing, so unused RPC results cannot
  hang backward. Unused outputs of a message that is reached get zeros.
* Tensors are recorded inside lists, tuples, namedtuples, dicts and
  dataclasses; a Tensor hidden in another object travels pickled, as a
  plain leaf, and is not recorded.
* ``get_gradients`` maps leaf Tensors to gradient Tensors (plain ones, no
  grad, each wrapping its ``jax.Array``: ``g.value``), as tensorplay's does.

Importing this package registers the Tensor wire type (``_wire``), the
RPC hooks (``_sendrecv``) and ``RRef.backward`` (``_rref_backward``) in this
process. The dependency runs one way
(this package uses ``tensorplay_jax.rpc`` and ``tensorplay_jax.rpc.internal``;
RPC never imports it); ``tensorplay_jax/__init__.py`` imports this package,
so every worker takes part from its first RPC.

The seed example (one process: an RPC to itself, a backward pass through it) is
:func:`backward`'s.
"""

import threading as _threading

from tensorplay_jax.distributed.autograd import _rref_backward, _sendrecv, _wire
from tensorplay_jax.distributed.autograd._context import DistAutogradContext as DistAutogradContext
from tensorplay_jax.distributed.autograd._context import context as context
from tensorplay_jax.distributed.autograd._engine import backward as backward
from tensorplay_jax.distributed.autograd._functional import context_id_array as context_id_array
from tensorplay_jax.distributed.autograd._functional import differentiable_rpc as differentiable_rpc
from tensorplay_jax.distributed.autograd.api import _current_context as _current_context
from tensorplay_jax.distributed.autograd.api import _get_debug_info as _get_debug_info
from tensorplay_jax.distributed.autograd.api import _get_max_id as _get_max_id
from tensorplay_jax.distributed.autograd.api import _retrieve_context as _retrieve_context
from tensorplay_jax.distributed.autograd.api import get_gradients as get_gradients
from tensorplay_jax.distributed.autograd.api import is_available as is_available
from tensorplay_jax.distributed.autograd.api import is_initialized as is_initialized
from tensorplay_jax.rpc import register_hooks as _register_hooks
from tensorplay_jax.rpc.internal import register_rref_backward as _register_rref_backward

__all__ = [
    "DistAutogradContext",
    "backward",
    "context",
    "context_id_array",
    "differentiable_rpc",
    "get_gradients",
    "is_available",
    "is_initialized",
]

_install_lock = _threading.Lock()
_installed = False


def _install() -> None:
    """Register the Tensor wire type, the RPC hooks and ``RRef.backward`` here (once)."""
    global _installed
    with _install_lock:
        if not _installed:
            _wire.register()
            _register_hooks(_sendrecv.AutogradHooks())
            _register_rref_backward(_rref_backward.rref_backward)
            _installed = True


_install()
