"""Sending a call: the one path of ``rpc_sync``, ``rpc_async``, ``remote`` and the RRef proxies.

:func:`destination` finds the running agent and the worker a call goes to, and
checks the function; :func:`send` hands the call to the agent. A call that
carries an RRef whose ``remote()`` creation is still pending fails if that
creation fails before the call's result comes (:func:`guard`): while any
creation is awaited (:func:`track_creation` counts them), :func:`send` collects
the RRefs the encoder meets with their creation pending (the RRef encoder
reports each with :func:`carry`).

It imports neither ``api`` nor ``_rref``: both build on it, and so do the
proxies (``_rref_proxy``).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from tensorplay_jax.rpc._current import get_agent
from tensorplay_jax.rpc._futures import Future
from tensorplay_jax.rpc._protocol import CALL
from tensorplay_jax.rpc._types import WorkerInfo

if TYPE_CHECKING:
    from tensorplay_jax.rpc._rref import RRef

__all__ = [
    "call",
    "carry",
    "check_func",
    "destination",
    "guard",
    "send",
    "track_creation",
]

_carried = threading.local()  # .pending: the RRefs with pending creations a call carries
_carried.pending = None
# remote() creations this process still waits for: while none, calls skip the collecting.
creations_waited = 0
_count_lock = threading.Lock()


def check_func(func: Any, what: str) -> None:
    """Raise ``TypeError`` naming ``what`` if ``func`` is not callable."""
    if not callable(func):
        raise TypeError(f"{what}: func={func!r} is not callable")


def destination(to: Any, func: Any, what: str) -> tuple[Any, WorkerInfo]:
    """The running agent and the worker ``to`` names, for a call of ``func`` by ``what``.

    Raises:
      RpcNotInitializedError: no agent runs.
      UnknownWorkerError: ``to`` names no worker (see the agent's ``resolve``).
      TypeError: ``func`` is not callable.
    """
    agent = get_agent(what)
    dest = agent.resolve(to, what)
    check_func(func, what)
    return agent, dest


def call(to: Any, func: Any, args: Any, kwargs: Any, timeout: float, what: str) -> Future[Any]:
    """``rpc_async``'s path (``what`` names the public function in errors): a Future of
    ``func(*args, **kwargs)`` run on ``to``."""
    agent, dest = destination(to, func, what)
    return send(agent, dest, CALL, func, args, kwargs, timeout, (), what)


def send(
    agent: Any,
    dest: WorkerInfo,
    kind: int,
    func: Any,
    args: Any,
    kwargs: Any,
    timeout: float,
    extra: tuple,
    what: str,
) -> Future[Any]:
    """``agent.call``; its Future fails if an RRef argument's creation fails first."""
    if not creations_waited:  # no RRef here awaits its creation: nothing to watch
        return agent.call(dest, kind, func, tuple(args or ()), kwargs, timeout, extra=extra)
    _carried.pending = []
    try:
        fut = agent.call(dest, kind, func, tuple(args or ()), kwargs, timeout, extra=extra)
    finally:
        pending = _carried.pending or None
        _carried.pending = None
    return fut if pending is None else guard(fut, pending, what)


def carry(rref: RRef[Any]) -> None:
    """The encoder met ``rref``, whose creation is pending: the call being sent carries it."""
    pending = getattr(_carried, "pending", None)
    if pending is not None and not rref._created.done():  # type: ignore[union-attr]
        pending.append(rref)


def track_creation(created: Future[Any]) -> None:
    """Count ``created`` (a ``remote()``'s creation) as awaited until it is done."""
    global creations_waited
    with _count_lock:
        creations_waited += 1
    created.add_done_callback(_creation_done)


def _creation_done(_: Future[Any]) -> None:
    global creations_waited
    with _count_lock:
        creations_waited -= 1


def guard(fut: Future[Any], rrefs: list[RRef[Any]], what: str) -> Future[Any]:
    """``fut``'s outcome, unless the creation of one of ``rrefs`` fails before it comes.

    Example:
        >>> f = Future()
        >>> guard(f, [], "use") is f
        True
    """
    for r in rrefs:
        r._creation_error(what)  # settles those whose creation has been confirmed
    pending = [r for r in rrefs if r._created is not None and not r._confirmed]
    if not pending:
        return fut
    out: Future[Any] = Future(callback_executor=fut._executor)
    # What the callbacks settle, taken by the first that does: once ``out`` is settled
    # they hold neither it nor the RRefs. ``fut`` can stay in flight long after a
    # creation timed out (a call waiting on the owner), and ``out``'s error holds the
    # use's frames: kept by ``fut``'s callback, they would keep RRefs the user dropped.
    unsettled: list[tuple[Future[Any], list[RRef[Any]]]] = [(out, pending)]

    def settle() -> Future[Any] | None:
        try:
            return unsettled.pop()[0]
        except IndexError:  # settled already, in another thread
            return None

    def failed() -> bool:
        try:
            waiting = unsettled[0][1]
        except IndexError:
            return True
        for r in waiting:
            exc = r._creation_error(what)
            if exc is not None:
                target = settle()
                if target is not None:
                    target._try_set_exception(exc)
                return True
        return False

    def on_created(_: Future[Any]) -> None:
        failed()

    def on_done(f: Future[Any]) -> None:
        if not failed():
            target = settle()
            if target is not None:
                target._copy_from(f)

    for r in pending:
        r._created.add_done_callback(on_created)  # type: ignore[union-attr]
    fut.add_done_callback(on_done)
    return out
