"""The Future returned by ``rpc_async``: wait, value, done, then, add_done_callback, wait_all."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Executor
from typing import Any, Generic, TypeVar

from tensorplay_jax.rpc._local.watchdog import on_reader_thread

log = logging.getLogger(__name__)

__all__ = ["Future", "wait_all"]

T = TypeVar("T")
S = TypeVar("S")

_PENDING, _OK, _ERR = 0, 1, 2
_state_lock = threading.Lock()


class Future(Generic[T]):
    """The result of an asynchronous RPC (the shape of ``tensorplay.futures.Future``).

    Callbacks run once the value is set: for futures made by the RPC layer, in
    the RPC worker thread pool, or in the same-host transport's reading thread
    that set the value; inline otherwise.

    Example:
      >>> f = Future()
      >>> g = f.then(lambda fut: fut.wait() + 1)
      >>> f.set_result(41)
      >>> g.wait()
      42
    """

    __slots__ = ("_callbacks", "_done_lock", "_executor", "_state", "_value")

    def __init__(self, *, callback_executor: Executor | None = None) -> None:
        self._done_lock = threading.Lock()
        self._done_lock.acquire()
        self._state = _PENDING
        self._value: Any = None
        self._callbacks: list[Callable[[Future[T]], None]] = []
        self._executor = callback_executor

    def done(self) -> bool:
        """True once a value or an exception is set."""
        return self._state != _PENDING

    def wait(self, timeout: float | None = None) -> T:
        """Block until done and return the value, raising the exception if one was set.

        Args:
          timeout: seconds to wait; None waits as long as the RPC's own timeout allows.

        Raises:
          TimeoutError: ``timeout`` passed first.
        """
        if self._state == _PENDING:
            if not self._done_lock.acquire(timeout=-1 if timeout is None else max(timeout, 0)):
                raise TimeoutError(f"Future.wait: not done after {timeout} seconds")
            self._done_lock.release()
        if self._state == _ERR:
            raise self._value
        return self._value

    def value(self) -> T:
        """The value (waits if needed); raises the stored exception."""
        return self.wait()

    result = wait

    def exception(self) -> BaseException | None:
        """The stored exception after waiting, or None."""
        try:
            self.wait()
        except BaseException as e:
            return e
        return None

    def set_result(self, result: T) -> None:
        """Complete the future with ``result``."""
        self._finish(_OK, result)

    def set_exception(self, exc: BaseException) -> None:
        """Complete the future with ``exc``."""
        self._finish(_ERR, exc)

    def _finish(self, state: int, value: Any) -> None:
        with _state_lock:
            if self._state != _PENDING:
                raise RuntimeError("Future: a result or exception was already set")
            self._value = value
            self._state = state
            callbacks, self._callbacks = self._callbacks, []
        self._done_lock.release()
        for cb in callbacks:
            self._run(cb)

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

    def _run(self, cb: Callable[[Future[T]], None]) -> None:
        if self._executor is not None:
            if on_reader_thread():
                # A same-host link's reading thread runs callbacks itself (the watchdog
                # hands its reading on if one runs long); an error stays with the
                # callback, as it would in the pool, so the others still run.
                try:
                    cb(self)
                except Exception:
                    log.exception("rpc: a Future callback raised")
                return
            try:
                self._executor.submit(cb, self)
                return
            except RuntimeError:  # executor shut down
                pass
        cb(self)

    def add_done_callback(self, callback: Callable[[Future[T]], None]) -> None:
        """Call ``callback(self)`` when done (at once if already done)."""
        with _state_lock:
            if self._state == _PENDING:
                self._callbacks.append(callback)
                return
        self._run(callback)

    def then(self, callback: Callable[[Future[T]], S]) -> Future[S]:
        """Return a Future of ``callback(self)``, run once this one is done.

        If ``callback`` raises, the returned Future holds that exception.
        """
        out: Future[S] = Future(callback_executor=self._executor)

        def chain(f: Future[T]) -> None:
            try:
                out.set_result(callback(f))
            except BaseException as e:
                out.set_exception(e)

        self.add_done_callback(chain)
        return out

    def __repr__(self) -> str:
        state = {_PENDING: "pending", _OK: "done", _ERR: "failed"}[self._state]
        return f"<Future {state}>"


def wait_all(futures: Iterable[Future[Any]]) -> list[Any]:
    """Wait for every future and return their values in order; raises the first error.

    Example:
      >>> fs = [Future(), Future()]
      >>> for i, f in enumerate(fs): f.set_result(i)
      >>> wait_all(fs)
      [0, 1]
    """
    futures = list(futures)
    for f in futures:
        f.exception()
    return [f.wait() for f in futures]
