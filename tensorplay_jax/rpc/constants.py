"""tensorplay's RPC constants (``rpc.constants``), from the one table of settings.

Ported code reads them (``rpc.constants.DEFAULT_RPC_TIMEOUT_SEC``) to restore a
default timeout or to name "no timeout"; the values live in
:mod:`tensorplay_jax.runtime.settings`.

Example:
  >>> from tensorplay_jax.rpc import constants
  >>> constants.DEFAULT_RPC_TIMEOUT_SEC, constants.UNSET_RPC_TIMEOUT
  (60.0, -1.0)
"""

from __future__ import annotations

from tensorplay_jax.runtime import settings

__all__ = [
    "DEFAULT_INIT_METHOD",
    "DEFAULT_NUM_WORKER_THREADS",
    "DEFAULT_RPC_TIMEOUT_SEC",
    "DEFAULT_SHUTDOWN_TIMEOUT",
    "UNSET_RPC_TIMEOUT",
]

#: The RPC timeout of new options, in seconds.
DEFAULT_RPC_TIMEOUT_SEC: float = settings.DEFAULT_RPC_TIMEOUT_S
#: The init method of new options.
DEFAULT_INIT_METHOD: str = settings.DEFAULT_INIT_METHOD
#: The worker threads of new options.
DEFAULT_NUM_WORKER_THREADS: int = settings.DEFAULT_NUM_WORKER_THREADS
#: ``shutdown``'s default timeout, as tensorplay's: wait while the others are alive.
DEFAULT_SHUTDOWN_TIMEOUT: float = -1.0
#: A call's ``timeout`` meaning "this worker's RPC timeout".
UNSET_RPC_TIMEOUT: float = -1.0
