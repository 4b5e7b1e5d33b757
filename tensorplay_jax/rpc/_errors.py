"""Exception types raised by the RPC layer, and a callee's report of a call's error on stderr.

Each is a ``RuntimeError``, as the errors of tensorplay's RPC are, so a port's
``except RuntimeError:`` catches them; those that were a ``ValueError`` or a
``TypeError`` here before derive from that type too.
"""

from __future__ import annotations

import sys
import traceback

from tensorplay_jax.rpc._call_hooks import is_internal_target
from tensorplay_jax.runtime.settings import LOG_CALL_ERRORS_ENV, get_str

__all__ = [
    "AsyncExecutionError",
    "DestinationTypeError",
    "RpcError",
    "RpcNotInitializedError",
    "RpcPeerError",
    "RpcTimeoutError",
    "UnknownWorkerError",
    "WorkerNameError",
    "check_worker_name",
    "log_call_error",
    "not_initialized",
]

MAX_NAME_LEN = 128  # a worker name is shorter than this (tensorplay's limit)
_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-:.")


class RpcError(RuntimeError):
    """Base class of errors raised by the RPC layer itself (not by remote user code)."""


class RpcTimeoutError(RpcError, TimeoutError):
    """An RPC ran for longer than its timeout."""


class RpcPeerError(RpcError, ConnectionError):
    """The connection to a worker was lost or could not be made (it exited or is unreachable)."""


class RpcNotInitializedError(RpcError):
    """An RPC function was called before ``init_rpc`` or after ``shutdown``."""


class UnknownWorkerError(RpcError, ValueError):
    """No worker has the destination's name or rank ("could not find destination")."""


class WorkerNameError(RpcError, ValueError):
    """A worker name that is not valid, or that another worker of the group has."""


class AsyncExecutionError(RpcError, TypeError):
    """An ``@rpc.functions.async_execution`` function returned something other than a Future."""


class DestinationTypeError(TypeError, ValueError):
    """A destination that is not a name, an int rank or a WorkerInfo (tensorplay: ValueError)."""


def check_worker_name(name: object, what: str) -> str:
    """``name`` if it is a valid worker name, else raise :class:`WorkerNameError`.

    A name is 1 to 127 characters from letters, digits and ``_ - : .``.

    Example:
      >>> check_worker_name("trainer:0", "init_rpc")
      'trainer:0'
      >>> check_worker_name("abc*", "init_rpc")
      Traceback (most recent call last):
      ...
      tensorplay_jax.rpc._errors.WorkerNameError: init_rpc: invalid worker name 'abc*': Worker name must match ^[A-Za-z0-9_:.-]*$, and must be non-empty and shorter than 128 chars
    """  # noqa: E501
    if isinstance(name, str) and 0 < len(name) < MAX_NAME_LEN and _NAME_CHARS.issuperset(name):
        return name
    raise WorkerNameError(
        f"{what}: invalid worker name {name!r}: Worker name must match ^[A-Za-z0-9_:.-]*$, "
        f"and must be non-empty and shorter than {MAX_NAME_LEN} chars"
    )


def not_initialized(what: str) -> RpcNotInitializedError:
    """The error for ``what`` called before ``init_rpc`` or after ``shutdown`` (to raise).

    The message starts as tensorplay's does ("RPC has not been initialized").

    Example:
      >>> str(not_initialized("rpc_sync")).split(".")[0]
      'RPC has not been initialized (rpc_sync)'
    """
    return RpcNotInitializedError(
        f"RPC has not been initialized ({what}). Call "
        "tensorplay_jax.distributed.rpc.init_rpc(...) first (and not after shutdown())."
    )


def log_call_error(me: object, exc: BaseException, func: object = None) -> None:
    """Print the error a called function raised, on this (the callee's) stderr, as tensorplay does.

    ``me`` is this worker (its WorkerInfo), ``func`` the function called (None if
    it was not decoded); the package's own RPC targets are not reported.
    ``TENSORPLAY_JAX_RPC_LOG_CALL_ERRORS=0`` turns it off. The caller gets the
    error all the same.
    """
    if is_internal_target(func):
        return
    if (get_str(LOG_CALL_ERRORS_ENV) or "1").strip().lower() in ("0", "false", "no", "off"):
        return
    tb = "".join(traceback.format_exception(exc))
    print(f"On {me}:\n{exc!r}\n{tb}", file=sys.stderr, flush=True)


class MixedGroupError(RpcError, ValueError):
    """A dynamic worker (``world_size=None``) joining a fixed-size group (tensorplay:
    ``RuntimeError``, "RPC group mixes statically and dynamically initialized members")."""
