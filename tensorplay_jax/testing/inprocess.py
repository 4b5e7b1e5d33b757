"""Every RPC in this process: the path :func:`check_dist_grads` takes for its oracle.

Inside ``with in_process_rpc():`` this thread's RPC agent is an
:class:`InProcessAgent`, installed through the RPC layer's stand-in seam
(``rpc.internal.agent_for_this_thread``), so every way of calling works the
same, whatever name it was imported by (``rpc.rpc_sync``,
``from tensorplay_jax.rpc import rpc_sync``, ``rref.rpc_sync().method()``,
``dist_autograd.differentiable_rpc``): the function runs here, at once, on the
very objects given. No wire format, no recording, no distributed autograd
context: the same user code computes the same mathematics in one process,
where plain JAX can differentiate it (``jax.grad`` through Tensors that wrap
tracers; ``differentiable_rpc`` calls its function directly).

Worker names are checked as over RPC when RPC is initialized (the real agent
resolves them); ``get_worker_info()`` is this worker's. ``remote`` keeps its
value here and returns an RRef to it: ``to_here`` and the proxies give the very
value. The process's other threads (the real agent's) keep the real agent. One
block at a time per process.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from tensorplay_jax import rpc
from tensorplay_jax.futures import Future
from tensorplay_jax.rpc import internal

__all__ = ["InProcessAgent", "LocalRRef", "in_process_rpc"]

_lock = threading.Lock()


class LocalRRef:
    """An RRef-like handle on a value in this process (``check_dist_grads``'s parameters).

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


class _Values:
    """What the RPC layer's RRefs ask of an agent's RRef table, for values kept here."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self.values: dict[int, Future[Any]] = {}  # rref id -> the Future of remote()'s value
        self.users: weakref.WeakSet[rpc.RRef[Any]] = weakref.WeakSet()  # RRefs made here

    def new_id(self) -> int:
        return next(self._ids)

    def track(self, rref: rpc.RRef[Any]) -> None:
        self.users.add(rref)

    def enqueue_delete(self, owner: Any, rref_id: int, fork: int) -> None:
        self.values.pop(rref_id, None)

    def owned_ids(self) -> list[int]:
        return sorted(self.values)


class InProcessAgent:
    """The agent of a single in-process worker: each call runs here, at once, on the objects given.

    It answers what ``rpc_sync``, ``rpc_async``, ``remote`` and ``RRef`` ask of
    an agent (``resolve``, ``call``, ``rrefs``, ``me``...). ``outer``, the
    process's real agent if RPC is initialized, resolves worker names (so a
    wrong one fails as over RPC) and says who this worker is.

    Example:
      >>> agent = InProcessAgent(None)
      >>> agent.resolve("w1", "rpc_sync"), agent.call(agent.me, internal.CALL, max, (1, 2)).wait()
      (WorkerInfo(name='w1', id=0), 2)
    """

    calls_run_here = True  # rpc.internal.calls_run_here: differentiable_rpc calls func itself

    def __init__(self, outer: Any) -> None:
        self._outer = outer
        self.me = outer.me if outer is not None else rpc.WorkerInfo("in_process", 0)
        self.name, self.rank = self.me.name, self.me.id
        self.world_size = outer.world_size if outer is not None else 1
        self.rrefs = _Values()

    def debug_counters(self) -> dict[str, int]:
        """``rpc.get_debug_info``'s counters: calls run here at once, so nothing is in flight."""
        return {"num_pending_requests": 0, "num_inflight_served": 0, "num_owner_rrefs": 0}

    def resolve(self, to: Any, what: str) -> rpc.WorkerInfo:
        if self._outer is not None:
            return self._outer.resolve(to, what)
        if isinstance(to, rpc.WorkerInfo):
            return to
        if isinstance(to, int) and not isinstance(to, bool):
            return rpc.WorkerInfo(str(to), to)
        return rpc.WorkerInfo(str(to), 0)

    def call(
        self,
        to: rpc.WorkerInfo,
        kind: int,
        func: Any = None,
        args: tuple = (),
        kwargs: dict[str, Any] | None = None,
        timeout: float = -1,
        extra: tuple = (),
    ) -> Future[Any]:
        """Run one request here; the returned Future is done."""
        if kind == internal.FETCH:
            return self.rrefs.values[extra[0]]
        if kind not in (internal.CALL, internal.REMOTE):  # FORK_ADD, FORK_DEL: nothing to count
            return _done(None)
        fut: Future[Any] = Future()
        try:
            out = func(*self._owned(args), **self._owned(kwargs or {}))
        except Exception as e:
            fut.set_exception(e)
        else:
            if getattr(func, "_tpj_async_execution", False) and isinstance(out, Future):
                fut = out  # as over RPC: an async_execution function's Future is the reply
            else:
                fut.set_result(out)
        if kind == internal.REMOTE:
            self.rrefs.values[extra[0]] = fut
        return fut

    def _owned(self, x: Any) -> Any:
        """``x`` with the RRefs ``remote`` made here replaced by owner RRefs of their values,
        as the owner receives them over RPC (``local_value`` works on them)."""
        if isinstance(x, rpc.RRef):
            return rpc.RRef(x.to_here()) if x in self.rrefs.users else x
        if isinstance(x, list | tuple):
            items = [self._owned(v) for v in x]
            if all(a is b for a, b in zip(items, x, strict=True)):
                return x
            return type(x)(items) if type(x) in (list, tuple) else type(x)(*items)
        if isinstance(x, dict):
            out = {k: self._owned(v) for k, v in x.items()}
            return x if all(out[k] is x[k] for k in x) else out
        return x

    def wait_for_all_workers(self, timeout: float) -> None:
        raise RuntimeError("shutdown: not inside in_process_rpc(); leave the block first")

    def stop(self, graceful: bool = True, deadline: float | None = None) -> None:
        pass


@contextlib.contextmanager
def in_process_rpc() -> Iterator[None]:
    """Run every RPC of this thread in the block in this process (see the module docstring).

    Example:
      >>> from tensorplay_jax.distributed import rpc
      >>> with in_process_rpc():
      ...     from tensorplay_jax.rpc import rpc_sync
      ...     rpc_sync("anyone", max, args=(1, 2)), rpc.remote("w1", abs, args=(-3,)).to_here()
      (2, 3)
    """
    if not _lock.acquire(blocking=False):
        raise RuntimeError("in_process_rpc: already active (one block at a time, process-wide)")
    try:
        with internal.agent_for_this_thread(InProcessAgent(internal.current_agent())):
            yield
    finally:
        _lock.release()
