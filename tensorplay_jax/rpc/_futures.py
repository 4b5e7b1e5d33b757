"""The RPC layer's futures: :mod:`tensorplay_jax.futures`, with the reading-thread rule installed.

``rpc_async`` returns a :class:`~tensorplay_jax.futures.Future` whose callbacks
run in the agent's worker pool. A socket link's reading thread that
completes one runs its callbacks itself (the watchdog hands the reading on if
one runs long) instead of queueing them behind the pool: this module installs
that rule (``futures.run_callbacks_inline_when``) when RPC is imported.
"""

from __future__ import annotations

from tensorplay_jax.futures import Future, run_callbacks_inline_when, wait_all
from tensorplay_jax.rpc._socket.watchdog import on_reader_thread

__all__ = ["Future", "wait_all"]

run_callbacks_inline_when(on_reader_thread)
