"""The agent this process runs: set by ``init_rpc``, cleared by ``shutdown``.

Its own module so that what needs the agent (``_rref``, ``api``) reaches it
without importing the agent's module (which imports them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tensorplay_jax.rpc._errors import not_initialized

if TYPE_CHECKING:
    from tensorplay_jax.rpc._agent import Agent

__all__ = ["current_agent", "get_agent", "set_current"]

_current: Agent | None = None


def current_agent() -> Agent | None:
    """The running agent, or None outside ``init_rpc`` ... ``shutdown``.

    Example:
      >>> current_agent() is None  # no init_rpc in this process
      True
    """
    return _current


def get_agent(what: str) -> Agent:
    """The running agent; raises ``RpcNotInitializedError`` naming ``what`` without one.

    Example:
      >>> get_agent("rpc_sync")  # doctest: +ELLIPSIS
      Traceback (most recent call last):
      ...
      tensorplay_jax.rpc._errors.RpcNotInitializedError: rpc_sync: RPC has not been initialized...
    """
    agent = _current
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
