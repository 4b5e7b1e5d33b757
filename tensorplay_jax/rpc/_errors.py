"""Exception types raised by the RPC layer."""

from __future__ import annotations

__all__ = [
    "RpcError",
    "RpcNotInitializedError",
    "RpcPeerError",
    "RpcTimeoutError",
    "not_initialized",
]


class RpcError(RuntimeError):
    """Base class of errors raised by the RPC layer itself (not by remote user code)."""


class RpcTimeoutError(RpcError, TimeoutError):
    """An RPC ran for longer than its timeout."""


class RpcPeerError(RpcError, ConnectionError):
    """The connection to a worker was lost or could not be made (it exited or is unreachable)."""


class RpcNotInitializedError(RpcError):
    """An RPC function was called before ``init_rpc`` or after ``shutdown``."""


def not_initialized(what: str) -> RpcNotInitializedError:
    """The error for ``what`` called before ``init_rpc`` or after ``shutdown`` (to raise).

    Example:
      >>> str(not_initialized("rpc_sync")).split(".")[0]
      'rpc_sync: RPC has not been initialized'
    """
    return RpcNotInitializedError(
        f"{what}: RPC has not been initialized. Call tensorplay_jax.distributed.rpc.init_rpc(...) "
        "first (and not after shutdown())."
    )
