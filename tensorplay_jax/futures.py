"""The one Future of the package, with ``collect_all`` and ``wait_all`` (``torch.futures``).

A :class:`Future` holds the result of work that finishes later: an RPC
(``rpc_async``), a process-group call (``Work.get_future()``), or anything
user code completes itself (an ``@rpc.functions.async_execution`` function
returns one). Any thread may complete it with :meth:`Future.set_result` or
:meth:`Future.set_exception`; :meth:`Future.wait` blocks until then.

Callbacks (:meth:`Future.add_done_callback`, :meth:`Future.then`) run once,
when the future completes: in the thread that completes it, or, for a future
made with a ``callback_executor`` (the RPC layer's), in that executor. A
callback that raises has its error logged; the other callbacks still run.
A :meth:`Future.then` callback that raises fails the child future with a
:class:`CallbackError` (a ``RuntimeError``, as tensorplay's) whose
``__cause__`` is the callback's exception. A Future is local to its process:
pickling one (passing it to an RPC) raises a ``RuntimeError``.

Two kinds of futures complete in the waiting thread itself: a future made
with ``drive=`` (a process group's queued send or receive) runs ``drive``
when waited on, and the futures chained from it drive it in turn.

Example:
    >>> from tensorplay_jax.futures import Future, collect_all, wait_all
    >>> a, b = Future(), Future()
    >>> both = collect_all([a, b])
    >>> a.set_result(1); b.set_result(2)
    >>> [f.value() for f in both.wait()], wait_all([a, b.then(lambda f: f.value() * 10)])
    ([1, 2], [1, 20])
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Executor
from typing import Any, Generic, TypeVar

__all__ = ["CallbackError", "Future", "FuturePicklingError", "collect_all", "wait_all"]

log = logging.getLogger(__name__)

T = TypeVar("T")
S = TypeVar("S")

_PENDING, _OK, _ERR = 0, 1, 2
_TWICE = (
    "Attempting to mark a completed Future as complete again: it is already completed (a "
    "result or exception was already set). Note that a Future can only be marked completed once."
)


class CallbackError(RuntimeError):
    """A :meth:`Future.then` callback raised; ``__cause__`` is its exception."""


class FuturePicklingError(RuntimeError, TypeError):
    """A Future was pickled (sent in an RPC, saved): it is local to its process."""


def _check_callback(callback: object, what: str) -> None:
    if not callable(callback):
        raise TypeError(
            f"{what}: incompatible function arguments: callback must be callable, "
            f"got {callback!r:.80}"
        )


_state_lock = threading.Lock()  # guards every future's state and callback list (held briefly)


def _never() -> bool:
    return False


# Whether the current thread runs executor-bound callbacks itself (see run_callbacks_inline_when).
_inline_here: Callable[[], bool] = _never


def run_callbacks_inline_when(check: Callable[[], bool] | None) -> None:
    """Run callbacks in the completing thread, not the executor, while ``check()`` is True.

    The RPC layer installs this: a transport's reading thread that completes a
    future runs its callbacks itself (the transport hands its reading to
    another thread if one runs long), instead of queueing them behind the
    worker pool. ``None`` removes the check. It is not needed by user code.

    Example:
        >>> import concurrent.futures
        >>> pool = concurrent.futures.ThreadPoolExecutor(1)
        >>> f = Future(callback_executor=pool)
        >>> run_callbacks_inline_when(lambda: True)
        >>> seen = []
        >>> f.add_done_callback(lambda fut: seen.append(threading.current_thread().name))
        >>> f.set_result(None)
        >>> run_callbacks_inline_when(None)
        >>> seen == [threading.current_thread().name]
        True
        >>> pool.shutdown()
    """
    global _inline_here
    _inline_here = _never if check is None else check


class Future(Generic[T]):
    """The result of work that finishes later (``torch.futures.Future``'s methods).

    Args:
        callback_executor: where callbacks run (an ``Executor``); None: in the
            thread that completes the future, or at once when it is done.
        drive: for a future this process completes on demand (a process
            group's queued send/receive): called with ``wait``'s timeout by
            :meth:`wait`, :meth:`value` and :meth:`done` while it is pending.
            If it is still pending afterwards, :meth:`wait` raises instead of
            blocking, since no one else will complete it.

    Example:
        >>> f = Future()
        >>> g = f.then(lambda fut: fut.wait() + 1)
        >>> f.set_result(41)
        >>> g.wait(), g.done()
        (42, True)
    """

    __slots__ = ("_callbacks", "_done_lock", "_drive", "_executor", "_state", "_value")

    def __init__(
        self,
        *,
        callback_executor: Executor | None = None,
        drive: Callable[[float | None], None] | None = None,
    ) -> None:
        self._done_lock = threading.Lock()  # held while pending: waiting is acquiring it
        self._done_lock.acquire()
        self._state = _PENDING
        self._value: Any = None
        self._callbacks: list[Callable[[Future[T]], None]] = []
        self._executor = callback_executor
        self._drive = drive

    # ------------------------------------------------------------------ reading
    def done(self) -> bool:
        """True once a result or an exception is set (a ``drive`` runs first).

        Example:
            >>> f = Future(); f.done()
            False
        """
        if self._state == _PENDING and self._drive is not None:
            self._drive(None)
        return self._state != _PENDING

    def wait(self, timeout: float | None = None) -> T:
        """Block until done; return the result, or raise the exception that was set.

        Args:
            timeout: seconds to wait; None waits for as long as it takes (an RPC's
                future is completed by its own ``timeout`` at the latest).

        Raises:
            TimeoutError: ``timeout`` passed first.
            RuntimeError: a ``drive``-n future that its ``drive`` did not complete.

        Example:
            >>> f = Future(); f.set_result("x"); f.wait()
            'x'
            >>> Future().wait(timeout=0.01)
            Traceback (most recent call last):
            ...
            TimeoutError: Future.wait: not done after 0.01 seconds
        """
        self._wait_done(timeout)
        if self._state != _ERR:
            return self._value
        # The raise gives the exception a traceback holding this frame: drop ``self`` from
        # it, or the future and its exception would hold each other (and every frame up
        # the stack) until the cyclic collector runs.
        try:
            raise self._value
        finally:
            self = None

    def _wait_done(self, timeout: float | None) -> None:
        """Block until done (``wait``'s errors if it does not get there)."""
        if self._state == _PENDING:
            if self._drive is not None:
                self._drive(timeout)
                if self._state == _PENDING:
                    raise RuntimeError(
                        "Future.wait: not done, and nothing in this process will set it"
                    )
            elif not self._done_lock.acquire(timeout=-1 if timeout is None else max(timeout, 0)):
                raise TimeoutError(f"Future.wait: not done after {timeout} seconds")
            else:
                self._done_lock.release()

    def value(self) -> T:
        """The result (waiting for it if needed); raises the exception that was set.

        Example:
            >>> f = Future(); f.set_result(3); f.value()
            3
        """
        return self.wait()

    result = wait

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The exception that was set, after waiting; None if a result was set.

        The exception is returned without being raised here: a raise would give it a
        traceback holding this caller's frames (and whatever they hold) for as long as
        the future keeps it.

        Example:
            >>> f = Future(); f.set_exception(KeyError("k")); f.exception()
            KeyError('k')
        """
        self._wait_done(timeout)
        return self._value if self._state == _ERR else None

    # ------------------------------------------------------------------ completing
    def set_result(self, result: T) -> None:
        """Complete the future with ``result`` and run its callbacks.

        Raises:
            RuntimeError: it is already completed.

        Example:
            >>> f = Future(); f.set_result(1); f.set_result(2)  # doctest: +ELLIPSIS
            Traceback (most recent call last):
            ...
            RuntimeError: Attempting to mark a completed Future as complete again: ...
        """
        self._finish(_OK, result)

    def set_exception(self, exception: BaseException) -> None:
        """Complete the future with ``exception`` (raised by :meth:`wait`) and run its callbacks.

        Raises:
            TypeError: ``exception`` is not an exception.
            RuntimeError: it is already completed.

        Example:
            >>> f = Future(); f.set_exception(ValueError("no")); f.exception()
            ValueError('no')
        """
        if not isinstance(exception, BaseException):
            raise TypeError(
                f"Future.set_exception: expected an exception, got {type(exception).__name__}"
            )
        self._finish(_ERR, exception)

    def _finish(self, state: int, value: Any) -> None:
        with _state_lock:
            if self._state != _PENDING:
                raise RuntimeError(_TWICE)
            self._value = value
            self._state = state
            callbacks, self._callbacks = self._callbacks, []
        self._done_lock.release()
        for cb in callbacks:
            self._run(cb)

    # The package's own completions, which may race (a reply against its timeout): the
    # first one wins and the others are no-ops.
    def _try_set_result(self, result: Any) -> bool:
        return self._try_finish(_OK, result)

    def _try_set_exception(self, exc: BaseException) -> bool:
        return self._try_finish(_ERR, exc)

    def _copy_from(self, other: Future[Any]) -> None:
        self._try_finish(other._state, other._value)

    def _try_finish(self, state: int, value: Any) -> bool:
        try:
            self._finish(state, value)
        except RuntimeError:
            return False
        return True

    # ------------------------------------------------------------------ callbacks
    def _call(self, cb: Callable[[Future[T]], Any]) -> None:
        try:
            cb(self)
        except Exception:
            log.exception("a Future callback raised")

    def _run(self, cb: Callable[[Future[T]], Any]) -> None:
        if self._executor is not None and type(cb) is not _Inline and not _inline_here():
            try:
                self._executor.submit(self._call, cb)
                return
            except RuntimeError:  # the executor is shut down: run it here
                pass
        self._call(cb)

    def add_done_callback(self, callback: Callable[[Future[T]], None]) -> None:
        """Call ``callback(self)`` once done (at once if it is done already).

        An error ``callback`` raises is logged; use :meth:`then` to keep it.

        Raises:
            TypeError: ``callback`` is not callable.

        Example:
            >>> f = Future(); f.add_done_callback(lambda fut: print("got", fut.value()))
            >>> f.set_result(5)
            got 5
        """
        _check_callback(callback, "Future.add_done_callback")
        with _state_lock:
            if self._state == _PENDING:
                self._callbacks.append(callback)
                return
        self._run(callback)

    def _when_done(self, callback: Callable[[Future[T]], None]) -> None:
        """As :meth:`add_done_callback`, always in the completing thread (for short callbacks)."""
        with _state_lock:
            if self._state == _PENDING:
                self._callbacks.append(_Inline(callback))
                return
        callback(self)

    def then(self, callback: Callable[[Future[T]], S]) -> Future[S]:
        """A Future of ``callback(self)``, run once this one is done.

        If ``callback`` raises (reading a failed future's value included), the
        returned Future fails with a :class:`CallbackError`, a ``RuntimeError``
        naming the callback's exception, which is its ``__cause__``.

        Raises:
            TypeError: ``callback`` is not callable.

        Example:
            >>> f = Future(); g = f.then(lambda fut: fut.value() / 0); f.set_result(1)
            >>> g.exception()
            CallbackError('Got the following error when running the callback: ZeroDivisionError: division by zero')
            >>> type(g.exception().__cause__)
            <class 'ZeroDivisionError'>
        """  # noqa: E501
        _check_callback(callback, "Future.then")
        drive = self._drive_pending if self._drive is not None else None
        out: Future[S] = Future(callback_executor=self._executor, drive=drive)

        def chain(f: Future[T]) -> None:
            try:
                out.set_result(callback(f))
            except Exception as e:  # the callback's error belongs to the child
                err = CallbackError(
                    f"Got the following error when running the callback: {type(e).__name__}: {e}"
                )
                err.__cause__ = e
                out.set_exception(err)
            except BaseException as e:
                out.set_exception(e)

        self.add_done_callback(chain)
        return out

    def _drive_pending(self, timeout: float | None) -> None:
        if self._state == _PENDING and self._drive is not None:
            self._drive(timeout)

    def __reduce__(self) -> Any:
        raise FuturePicklingError(
            "Can not pickle torch.futures.Future (tensorplay_jax.futures.Future): a Future "
            "is local to its process; send its value (fut.wait()) instead"
        )

    def __repr__(self) -> str:
        state = {_PENDING: "pending", _OK: "done", _ERR: "failed"}[self._state]
        return f"<Future {state}>"


class _Inline:
    """A callback that runs in the completing thread whatever the future's executor."""

    __slots__ = ("callback",)

    def __init__(self, callback: Callable[[Future[Any]], None]) -> None:
        self.callback = callback

    def __call__(self, fut: Future[Any]) -> None:
        self.callback(fut)


def collect_all(futures: Iterable[Future[Any]]) -> Future[list[Future[Any]]]:
    """A Future of the list of ``futures``, done when all are (or at the first failure).

    As ``torch.futures.collect_all``: the result is the futures themselves
    (read each one's ``value()``); if one fails, the returned Future fails at
    once with its exception.

    Example:
        >>> a, b = Future(), Future()
        >>> both = collect_all([a, b])
        >>> a.set_result(0); both.done()
        False
        >>> b.set_result(1); [f.value() for f in both.wait()]
        [0, 1]
    """
    futures = list(futures)
    executor = next((f._executor for f in futures if f._executor is not None), None)

    def drive(timeout: float | None) -> None:  # wait for each (driving those that need it)
        for f in futures:
            if out._state != _PENDING:
                return
            f.exception(timeout)

    driven = any(f._drive is not None for f in futures)
    out: Future[list[Future[Any]]] = Future(
        callback_executor=executor, drive=drive if driven else None
    )
    left = [len(futures)]

    def one_done(f: Future[Any]) -> None:
        if f._state == _ERR:
            out._try_set_exception(f._value)
            return
        with _state_lock:
            left[0] -= 1
            last = left[0] == 0
        if last:
            out._try_set_result(futures)

    if not futures:
        out.set_result([])
    for f in futures:
        f._when_done(one_done)
    return out


def wait_all(futures: Iterable[Future[Any]]) -> list[Any]:
    """Wait for every future and return their results in order; raise the first failure.

    As ``torch.futures.wait_all``: it returns as soon as one fails, raising that
    exception.

    Example:
        >>> fs = [Future(), Future()]
        >>> for i, f in enumerate(fs): f.set_result(i)
        >>> wait_all(fs)
        [0, 1]
    """
    return [f.wait() for f in collect_all(futures).wait()]
