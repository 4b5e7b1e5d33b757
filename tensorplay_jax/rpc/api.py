"""The public RPC functions: init_rpc, rpc_sync, rpc_async, remote, get_worker_info, shutdown."""

from __future__ import annotations

import datetime
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

from tensorplay_jax.rpc import _agent, _sending
from tensorplay_jax.rpc._all_gather import _all_gather as _all_gather
from tensorplay_jax.rpc._all_gather import _barrier as _barrier
from tensorplay_jax.rpc._all_gather import _wait_all_workers as _wait_all_workers
from tensorplay_jax.rpc._errors import RpcTimeoutError, not_initialized
from tensorplay_jax.rpc._futures import Future
from tensorplay_jax.rpc._rref import RRef
from tensorplay_jax.rpc._shutdown import WHILE_ALIVE
from tensorplay_jax.rpc._types import GrpcRpcBackendOptions, RpcBackendOptions, WorkerInfo
from tensorplay_jax.rpc.backend_registry import BackendType, init_backend
from tensorplay_jax.runtime.init_method import release

__all__ = [
    "get_debug_info",
    "get_rpc_timeout",
    "get_worker_info",
    "get_worker_infos",
    "init_rpc",
    "is_available",
    "is_initialized",
    "remote",
    "rpc_async",
    "rpc_sync",
    "shutdown",
]

_init_lock = threading.Lock()


def _check_backend(backend: Any, options: Any) -> tuple[BackendType, GrpcRpcBackendOptions]:
    """The backend and options ``init_rpc`` runs with; tensorplay's errors for wrong ones.

    As tensorplay: ``backend`` is a :class:`BackendType` member or None (inferred from the
    options: ``GRPC``, also named ``TENSORPIPE``); the options are an
    :class:`RpcBackendOptions`, and ours for ``GRPC`` (given or inferred); another
    registered backend's agent handler checks its own.
    """
    if backend is not None and not isinstance(backend, BackendType):
        raise TypeError(
            f"init_rpc: Argument backend must be a member of BackendType, got {backend!r} "
            "(use rpc.BackendType.TENSORPIPE or rpc.BackendType.GRPC, the same backend here)"
        )
    chosen = BackendType.GRPC if backend is None else backend
    if options is None:
        return chosen, GrpcRpcBackendOptions()
    if not isinstance(options, RpcBackendOptions):
        raise TypeError(
            "init_rpc: Argument rpc_backend_options must be an instance of RpcBackendOptions, "
            f"got {type(options).__name__} (use rpc.TensorPipeRpcBackendOptions(...))"
        )
    if not isinstance(options, GrpcRpcBackendOptions) and chosen is BackendType.GRPC:
        if backend is None:
            raise TypeError(
                f"init_rpc: Could not infer backend for options {type(options).__name__}: "
                "use rpc.TensorPipeRpcBackendOptions (also named GrpcRpcBackendOptions)"
            )
        raise TypeError(
            "init_rpc: `rpc_backend_options` must be a `TensorPipeRpcBackendOptions` (also named "
            f"GrpcRpcBackendOptions), got {type(options).__name__}"
        )
    return chosen, options


def init_rpc(
    name: str,
    backend: BackendType | None = None,
    rank: int = -1,
    world_size: int | None = None,
    rpc_backend_options: GrpcRpcBackendOptions | None = None,
) -> None:
    """Start this process's RPC agent and meet the other workers.

    Args:
      name: this worker's unique name (letters, digits, ``_ - : .``; shorter than 128).
      backend: a :class:`BackendType` member (``TENSORPIPE`` and ``GRPC`` are the
        built-in backend; ``rpc.backend_registry`` adds others) or None.
      rank: this worker's rank; -1 reads ``RANK`` from the environment.
      world_size: number of workers; None joins a *dynamic* group, whatever
        ``WORLD_SIZE`` says (as tensorplay: launchers set it for every job, so pass
        ``world_size=int(os.environ["WORLD_SIZE"])`` for a fixed-size one): rank 0
        hosts it and comes first, the others join and leave (``shutdown()``) at any
        time, and a worker that dies is removed (see ``docs/guides`` on dynamic
        membership). A dynamic worker's rank is ``rank``, or ``RANK`` with ``env://``.
      rpc_backend_options: a :class:`GrpcRpcBackendOptions` (timeouts, init_method, TLS, ...).

    Raises:
      RuntimeError: RPC is already initialized in this process.
      TypeError: ``backend`` is not a :class:`BackendType` member; the options are not
        an ``RpcBackendOptions``, or not ours (tensorplay's messages).
      WorkerNameError: an invalid name, or two workers with the same name ("is not
        unique"); a ``RuntimeError`` and a ``ValueError``.
      ValueError: bad rank or world size; in a dynamic group, a live member has
        this name or rank; a group that mixes fixed-size and dynamic workers.
      TimeoutError: the other workers did not arrive within ``init_timeout``.

    Example:
      >>> import os
      >>> from tensorplay_jax.distributed import rpc
      >>> os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29561")
      >>> rpc.init_rpc("solo", rank=0, world_size=1)
      >>> rpc.rpc_sync("solo", max, args=(1, 2))
      2
      >>> rpc.shutdown()
    """
    backend, opts = _check_backend(backend, rpc_backend_options)
    with _init_lock:
        cur = _agent.current_agent()
        if cur is not None:
            raise RuntimeError(
                f"init_rpc: RPC is already initialized in this process (as worker {cur.name!r}, "
                f"rank {cur.rank}); call shutdown() before calling init_rpc again"
            )
        try:
            agent = init_backend(backend, name, rank, world_size, opts)
            agent.start()
        except BaseException:
            release("init_rpc")  # a file:// init method's handle on its file
            raise
        _agent.set_current(agent)
        agent.open()
        if agent.membership is not None:
            agent.membership.announce()  # every member knows this worker when init_rpc returns


def is_available() -> bool:
    """Whether RPC is available: always True here (tensorplay's is False in a build
    without it).

    Example:
      >>> is_available()
      True
    """
    return True


def is_initialized() -> bool:
    """True between ``init_rpc`` and ``shutdown``."""
    return _agent.current_agent() is not None


def rpc_async(
    to: str | int | WorkerInfo,
    func: Callable[..., Any],
    args: tuple | list | None = None,
    kwargs: dict[str, Any] | None = None,
    timeout: float = -1,
) -> Future[Any]:
    """Run ``func(*args, **kwargs)`` on worker ``to``; return a Future of the result.

    Args:
      to: destination: worker name, rank or WorkerInfo (this worker included).
      func: a function (by reference if importable there, else by value).
      args: positional arguments.
      kwargs: keyword arguments.
      timeout: seconds; -1 = ``rpc_timeout`` from the options, 0 = no limit.

    Returns:
      A :class:`Future`; ``wait()`` returns the result or raises the remote
      exception (same type, remote traceback in the message), ``RpcTimeoutError``
      or ``RpcPeerError``.

    Example:
      >>> fut = rpc.rpc_async("worker1", jnp.add, args=(x, 1))  # doctest: +SKIP
      >>> fut.wait()  # doctest: +SKIP
    """
    return _sending.call(to, func, args, kwargs, timeout, "rpc_async")


def rpc_sync(
    to: str | int | WorkerInfo,
    func: Callable[..., Any],
    args: tuple | list | None = None,
    kwargs: dict[str, Any] | None = None,
    timeout: float = -1,
) -> Any:
    """Run ``func(*args, **kwargs)`` on worker ``to`` and return its result (blocking).

    Same arguments as :func:`rpc_async`.

    Example:
      >>> rpc.rpc_sync("worker1", jnp.add, args=(jnp.ones(2), 1))  # doctest: +SKIP
      Array([2., 2.], dtype=float32)
    """
    return _sending.call(to, func, args, kwargs, timeout, "rpc_sync").wait()


def remote(
    to: str | int | WorkerInfo,
    func: Callable[..., Any],
    args: tuple | list | None = None,
    kwargs: dict[str, Any] | None = None,
    timeout: float = -1,
) -> RRef[Any]:
    """Run ``func`` on worker ``to`` and keep the result there; return an RRef to it.

    Returns at once; an error in ``func``, or a creation not confirmed within
    ``timeout``, surfaces on the next use of the RRef (``to_here``, the proxies,
    passing it on): the error, or an ``RpcTimeoutError`` naming the owner, the
    function and the timeout. Naming this worker gives an RRef it owns
    (``is_owner()``; ``local_value()`` and ``to_here()`` return the object the
    function returned, once it has run).

    Args:
      to: destination: worker name, rank or WorkerInfo (this worker included).
      func: a function (by reference if importable there, else by value).
      args: positional arguments.
      kwargs: keyword arguments.
      timeout: seconds for the owner to confirm the creation; -1 =
        ``rpc_timeout`` from the options, 0 = no limit.

    Example:
      >>> rref = rpc.remote("worker1", jnp.zeros, args=(3,))  # doctest: +SKIP
      >>> rref.to_here()  # doctest: +SKIP
      Array([0., 0., 0.], dtype=float32)
    """
    agent, dest = _sending.destination(to, func, "remote")
    return RRef._remote(agent, dest, func, args, kwargs, timeout)


def get_worker_info(worker_name: str | None = None) -> WorkerInfo:
    """The WorkerInfo of ``worker_name`` (this worker if None).

    Raises:
      UnknownWorkerError: no worker has that name ("could not find destination"; a
        ``RuntimeError`` and a ``ValueError``).
    """
    agent = _agent.get_agent("get_worker_info")
    if worker_name is None:
        return agent.me
    return agent.resolve(worker_name, "get_worker_info")


def get_worker_infos() -> list[WorkerInfo]:
    """The WorkerInfo of every worker in the group now (this one included), by rank.

    In a fixed-size group that is every worker; in a dynamic group
    (``world_size=None``) the members at this moment: joiners appear once they
    have joined, and workers that left or died are gone.

    Example:
      >>> rpc.get_worker_infos()  # doctest: +SKIP
      [WorkerInfo(name='ps', id=0), WorkerInfo(name='trainer1', id=1)]
    """
    agent = _agent.get_agent("get_worker_infos")
    return sorted(list(agent.peers.workers.values()), key=lambda w: w.id)


def get_debug_info() -> dict[str, Any]:
    """Counters of this worker's agent: pending calls, served calls in flight, owned RRef values."""
    agent = _agent.get_agent("get_debug_info")
    return {
        "name": agent.name,
        "rank": agent.rank,
        "world_size": agent.world_size,
        **agent.debug_counters(),
    }


def shutdown(graceful: bool = True, timeout: float = -1) -> None:
    """Stop RPC on this worker.

    Args:
      graceful: first wait until every worker's outstanding work (calls in
        flight, RRef releases) is done, then all stop together. Workers that
        died are skipped.
      timeout: seconds for the whole shutdown, stopping included. -1, the
        default: as tensorplay, no time limit on the graceful wait while the
        workers still to arrive are alive (a parameter server waits in
        shutdown for as long as its trainers train); a worker that exits is
        skipped, and one that does not answer a ping within
        ``RPC_SHUTDOWN_PING_TIMEOUT_S`` (30 s: stopped, hung or cut off) fails
        the wait. 0 = no limit at all on the graceful wait. Stopping stays
        bounded in every case.

    Raises:
      RpcNotInitializedError: RPC is not initialized.
      TimeoutError: the graceful wait ran out of time, or a worker still to
        arrive did not answer; the message names the ranks that did not
        arrive (stopped, hung or cut off), or this worker's own unfinished
        work. This worker is stopped all the same.

    Example:
      >>> rpc.shutdown(timeout=30)  # doctest: +SKIP
    """
    with _init_lock:
        agent = _agent.current_agent()
        if agent is None:
            raise not_initialized("shutdown")
        if timeout is None or timeout < 0:
            timeout = WHILE_ALIVE
        deadline = time.monotonic() + timeout if timeout > 0 else None
        try:
            if graceful and agent.membership is not None:  # leave a dynamic group
                try:
                    agent.membership.leave(timeout)
                except TimeoutError:
                    deadline = time.monotonic()
                    raise
            elif graceful:
                try:
                    agent.barrier.wait_for_all_workers(timeout)
                except TimeoutError:
                    deadline = time.monotonic()  # the others are not coming: stop now
                    raise
                except OSError as e:  # the store (rank 0) is gone
                    warnings.warn(
                        f"shutdown: graceful wait abandoned ({e}); stopping this worker now",
                        stacklevel=2,
                    )
        finally:
            _agent.set_current(None)
            agent.stop(graceful=graceful, deadline=deadline)
            release("init_rpc")


def get_rpc_timeout() -> float:
    """The default timeout, in seconds, of this worker's RPCs (``rpc_timeout`` of its options)."""
    return _agent.get_agent("get_rpc_timeout").options.rpc_timeout


def _set_rpc_timeout(rpc_timeout: float) -> None:
    """Set the default timeout of this worker's RPCs from now on (tensorplay's private helper)."""
    if isinstance(rpc_timeout, bool) or not isinstance(rpc_timeout, int | float) or rpc_timeout < 0:
        raise ValueError(f"_set_rpc_timeout: rpc_timeout={rpc_timeout!r} must be seconds >= 0")
    _agent.get_agent("_set_rpc_timeout").options.rpc_timeout = float(rpc_timeout)


def _rref_context_get_debug_info() -> dict[str, str]:
    """tensorplay's RRef counters of this worker, as text: owned RRefs, forks, pending ones.

    ``num_owner_rrefs``: values this worker owns; ``num_forks``: users of them
    elsewhere that the owner knows of; ``num_pending_futures``: owned values not
    made yet; ``num_pending_users``: RRefs held here whose ``remote()`` creation
    the owner has not answered yet.
    """
    rrefs = _agent.get_agent("_rref_context_get_debug_info").rrefs
    records = {r.id: r for r in map(rrefs.lookup, rrefs.owned_ids()) if r is not None}
    held = list(rrefs._users)
    for u in held:  # a remote() to this worker itself: its RRef holds the owner's record
        if u._record is not None:
            records.setdefault(u._record.id, u._record)
    owned = list(records.values())
    users = [u for u in held if not u.is_owner()]
    return {
        "num_owner_rrefs": str(len(owned)),
        "num_forks": str(sum(len(r.forks) for r in owned)),
        "num_pending_futures": str(sum(not r.value.done() for r in owned)),
        # a creation that failed or timed out is no longer pending; no owner is asked
        "num_pending_users": str(
            sum(u._created is not None and not u._created.done() for u in users)
        ),
    }


def _delete_all_user_and_unforked_owner_rrefs(
    timeout: datetime.timedelta = datetime.timedelta(minutes=5),
) -> None:
    """Release every user RRef this worker holds, and wait until their owners have the
    releases (tensorplay's private helper; graceful shutdown does the same).

    A released RRef refuses every later use ("Cannot call to_here() on it after
    deletion"). An owner's value no other worker references goes when its last local
    handle goes, as always: there is nothing more to delete on the owner's side.

    Raises:
      RpcTimeoutError: the releases were not all answered within ``timeout``.
      RpcPeerError: a release did not reach its owner, sent again as often as
        bookkeeping messages are (``rpc/_retries``).
    """
    agent = _agent.get_agent("_delete_all_user_and_unforked_owner_rrefs")
    sent = agent.rrefs.release_users()
    end = time.monotonic() + timeout.total_seconds()
    for fut in sent:
        try:
            fut.wait(max(end - time.monotonic(), 0.0))
        except TimeoutError as e:
            raise RpcTimeoutError(
                f"_delete_all_user_and_unforked_owner_rrefs: {len(sent)} RRef release(s) "
                f"not answered by their owners within {timeout.total_seconds():g} s"
            ) from e


def _get_debug_info() -> dict[str, Any]:
    """tensorplay's private debug counters: :func:`get_debug_info` with the RRef counters."""
    return {**get_debug_info(), **_rref_context_get_debug_info()}
