"""``async_execution``: let an RPC target return a Future; the reply is sent when it completes."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from tensorplay_jax.futures import Future
from tensorplay_jax.rpc._errors import AsyncExecutionError

__all__ = ["async_execution"]

F = TypeVar("F", bound=Callable[..., Any])


def async_execution(fn: F) -> F:
    """Mark ``fn`` as returning a :class:`~tensorplay_jax.rpc.Future`; the caller gets its value.

    The serving thread is released as soon as ``fn`` returns, so a function
    can chain further RPCs with ``then`` without holding a worker thread.
    Called by RPC, ``fn`` must return a Future: anything else fails the call
    with an ``AsyncExecutionError`` (a ``RuntimeError`` and a ``TypeError``).

    Example:
      >>> from tensorplay_jax.rpc import Future
      >>> @async_execution
      ... def later(x):
      ...     f = Future()
      ...     f.set_result(x + 1)
      ...     return f
      >>> later(1).wait()
      2
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    wrapper._tpj_async_execution = True  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


def async_future(info: Any, result: Any) -> bool:
    """True if ``result`` (what call ``info``'s ``async_execution`` function returned) is a Future.

    Raises:
      AsyncExecutionError: it is not.
    """
    if isinstance(result, Future):
        return True
    t = type(result)
    raise AsyncExecutionError(
        f"{info.func_name}: Functions decorated with @rpc.async_function must return a "
        "torch.futures.Future object, (tensorplay's words; here: @rpc.functions.async_execution "
        f"and tensorplay_jax.futures.Future) but got {t.__module__}.{t.__qualname__}"
    )
