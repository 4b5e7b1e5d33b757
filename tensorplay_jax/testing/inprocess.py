"""Every RPC in this process: the path :func:`check_dist_grads` takes for its oracle.

Inside ``with in_process_rpc():`` the public ``rpc_sync``, ``rpc_async`` and
``remote`` (of ``tensorplay_jax.rpc`` and ``tensorplay_jax.distributed.rpc``)
and ``dist_autograd.differentiable_rpc`` call the function here, at once, on
the very objects given: no agent, no wire format, no recording, no
distributed autograd context. ``remote`` returns a :class:`LocalRRef`. So the
same user code computes the same mathematics in one process, where plain JAX
can differentiate it (``jax.grad`` through Tensors that wrap tracers).

Code that imported the functions by name (``from ...rpc import rpc_sync``)
before the block keeps the real ones: call them through the module
(``rpc.rpc_sync``), as the tensorplay examples do. The swap is process-wide;
one block at a time.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp

from tensorplay_jax import rpc
from tensorplay_jax.rpc import Future
from tensorplay_jax.tensors import Tensor

__all__ = ["LocalRRef", "in_process_rpc"]

_MODULES = ("tensorplay_jax.rpc", "tensorplay_jax.rpc.api", "tensorplay_jax.distributed.rpc")
_AUTOGRAD = "tensorplay_jax.distributed.autograd"
_lock = threading.Lock()


class LocalRRef:
    """The RRef of a value ``remote`` made in this process (inside :func:`in_process_rpc`).

    Example:
      >>> r = LocalRRef(3, "worker1")
      >>> r.to_here(), r.local_value(), r.owner_name(), r.rpc_sync().__add__(1)
      (3, 3, 'worker1', 4)
    """

    def __init__(self, value: Any, owner: str = "") -> None:
        self._value, self._owner = value, owner

    def to_here(self, timeout: float = -1) -> Any:
        return self._value

    def local_value(self) -> Any:
        return self._value

    def owner_name(self) -> str:
        return self._owner

    def owner(self) -> Any:
        return rpc.get_worker_info(self._owner) if rpc.is_initialized() else self._owner

    def is_owner(self) -> bool:
        return True

    def confirmed_by_owner(self) -> bool:
        return True

    def rpc_sync(self, timeout: float = -1) -> Any:
        return _Proxy(self._value, lambda v: v)

    def rpc_async(self, timeout: float = -1) -> Any:
        return _Proxy(self._value, _done)

    def remote(self, timeout: float = -1) -> Any:
        return _Proxy(self._value, lambda v: LocalRRef(v, self._owner))

    def __repr__(self) -> str:
        return f"LocalRRef(owner={self._owner!r})"


class _Proxy:
    def __init__(self, value: Any, wrap: Callable[[Any], Any]) -> None:
        self._value, self._wrap = value, wrap

    def __getattr__(self, method: str) -> Any:
        return lambda *a, **k: self._wrap(getattr(self._value, method)(*a, **k))


def _done(value: Any) -> Future[Any]:
    fut: Future[Any] = Future()
    fut.set_result(value)
    return fut


def _name(to: Any) -> str:
    if isinstance(to, str):
        if rpc.is_initialized():
            rpc.get_worker_info(to)  # a wrong name fails here as it would over RPC
        return to
    return str(getattr(to, "name", to))


def _rpc_sync(to: Any, func: Callable[..., Any], args: Any = None, kwargs: Any = None,
              timeout: float = -1) -> Any:  # fmt: skip
    _name(to)
    return func(*(args or ()), **(kwargs or {}))


def _rpc_async(to: Any, func: Callable[..., Any], args: Any = None, kwargs: Any = None,
               timeout: float = -1) -> Future[Any]:  # fmt: skip
    fut: Future[Any] = Future()
    try:
        fut.set_result(_rpc_sync(to, func, args, kwargs))
    except Exception as e:
        fut.set_exception(e)
    return fut


def _remote(to: Any, func: Callable[..., Any], args: Any = None, kwargs: Any = None,
            timeout: float = -1) -> LocalRRef:  # fmt: skip
    return LocalRRef(_rpc_sync(to, func, args, kwargs), _name(to))


def _as_tensor(x: Any) -> Any:
    floating = isinstance(x, jax.Array | jax.core.Tracer) and jnp.issubdtype(x.dtype, jnp.inexact)
    return Tensor(x, requires_grad=True) if floating else x


def _as_array(x: Any) -> Any:
    return x.value if isinstance(x, Tensor) else x


def _differentiable_rpc(to: Any, func: Any, args: Any = (), kwargs: Any = None,
                        timeout: float = -1, *, mode: str = "jax", **_: Any) -> Any:  # fmt: skip
    _name(to)
    if mode == "tape":  # the callee sees Tensors and returns Tensors
        args, kwargs = jax.tree_util.tree_map(_as_tensor, (tuple(args), kwargs or {}))
        out = func(*args, **kwargs)
        return jax.tree_util.tree_map(_as_array, out, is_leaf=lambda v: isinstance(v, Tensor))
    return func(*args, **(kwargs or {}))


_LOCAL = {"rpc_sync": _rpc_sync, "rpc_async": _rpc_async, "remote": _remote}


@contextlib.contextmanager
def in_process_rpc() -> Iterator[None]:
    """Run every RPC of the block in this process (see the module docstring).

    Example:
      >>> from tensorplay_jax.distributed import rpc
      >>> with in_process_rpc():
      ...     rpc.rpc_sync("anyone", max, args=(1, 2)), rpc.remote("w1", abs, args=(-3,)).to_here()
      (2, 3)
    """
    if not _lock.acquire(blocking=False):
        raise RuntimeError("in_process_rpc: already active (one block at a time, process-wide)")
    saved: list[tuple[Any, str, Any]] = []
    try:
        for mod in map(importlib.import_module, _MODULES):
            for attr, local in _LOCAL.items():
                saved.append((mod, attr, getattr(mod, attr)))
                setattr(mod, attr, local)
        autograd = importlib.import_module(_AUTOGRAD)
        saved.append((autograd, "differentiable_rpc", autograd.differentiable_rpc))
        autograd.differentiable_rpc = _differentiable_rpc
        yield
    finally:
        for mod, attr, value in reversed(saved):
            setattr(mod, attr, value)
        _lock.release()
