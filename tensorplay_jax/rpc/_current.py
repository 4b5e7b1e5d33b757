"""The agent this process runs (``init_rpc`` ... ``shutdown``), and per-thread stand-ins for it.

Its own module so that what needs the agent (``_rref``, ``api``) reaches it
without importing the agent's module (which imports them).

Everything that calls, serves or refers (``rpc_sync``, ``rpc_async``,
``remote``, ``RRef``) asks :func:`current_agent`, so an object with the
agent's methods can stand in for it. :func:`agent_for_this_thread` installs
one for a block of one thread, over the process's agent: that thread's RPCs,
whatever name they were imported by, go to it, while the process's other
threads (the real agent's serving and housekeeping threads) keep the real
agent. ``tensorplay_jax.testing.in_process_rpc`` installs an agent that runs
every call here, on the very objects given (:func:`calls_run_here`).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from tensorplay_jax.rpc._errors import not_initialized
from tensorplay_jax.runtime.serving import set_serving

if TYPE_CHECKING:
    from tensorplay_jax.rpc._agent import Agent

__all__ = [
    "agent_for_this_thread",
    "calls_run_here",
    "current_agent",
    "get_agent",
    "set_current",
]

_current: Agent | None = None
_this_thread = threading.local()  # .agent: a stand-in for this thread, over _current
_stand_ins = 0  # threads with a stand-in: while none, current_agent reads no thread-local
_stand_ins_lock = threading.Lock()


def current_agent() -> Agent | None:
    """This thread's stand-in, else the running agent; None outside ``init_rpc`` ... ``shutdown``.

    Example:
      >>> current_agent() is None  # no init_rpc in this process
      True
    """
    if _stand_ins:
        agent = getattr(_this_thread, "agent", None)
        if agent is not None:
            return agent
    return _current


def get_agent(what: str) -> Agent:
    """The running agent; raises ``RpcNotInitializedError`` naming ``what`` without one.

    Example:
      >>> get_agent("rpc_sync")  # doctest: +ELLIPSIS
      Traceback (most recent call last):
      ...
      tensorplay_jax.rpc._errors.RpcNotInitializedError: RPC has not been initialized (rpc_sync)...
    """
    agent = current_agent()
    if agent is None:
        raise not_initialized(what)
    return agent


def set_current(agent: Agent | None) -> None:
    """Make ``agent`` the running one (None: none).

    Example:
      >>> set_current(None)
      >>> current_agent() is None
      True
    """
    global _current
    _current = agent
    set_serving(agent is not None)  # its threads may start JAX at any moment


@contextlib.contextmanager
def agent_for_this_thread(agent: Any) -> Iterator[None]:
    """Make ``agent`` the one this thread's RPCs use inside the block, over the process's.

    ``agent`` has the methods of the real one that the calls use (``resolve``,
    ``call``, ``rrefs``, ``me``...); see ``tensorplay_jax.testing.inprocess``.

    Example:
      >>> class Stub:
      ...     calls_run_here = True
      >>> with agent_for_this_thread(Stub()):
      ...     calls_run_here()
      True
      >>> calls_run_here(), current_agent() is None
      (False, True)
    """
    global _stand_ins
    before = getattr(_this_thread, "agent", None)
    _this_thread.agent = agent
    with _stand_ins_lock:
        _stand_ins += 1
    try:
        yield
    finally:
        _this_thread.agent = before
        with _stand_ins_lock:
            _stand_ins -= 1


def calls_run_here() -> bool:
    """True while this thread's agent runs each call at once in this thread, on the objects given.

    Then nothing is encoded, sent or recorded: a caller that would otherwise
    wrap the call for transport (``differentiable_rpc``'s ``custom_vjp``) calls
    the function directly, so that JAX sees through it.

    Example:
      >>> calls_run_here()  # no agent, or a real one
      False
    """
    return bool(getattr(current_agent(), "calls_run_here", False))
