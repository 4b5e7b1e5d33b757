"""Work handles: what a process-group call with ``async_op=True`` (or ``isend``/``irecv``) returns.

tensorplay's ``dist.all_reduce(t, async_op=True)`` returns a ``Work``; ``wait()``
blocks until the call is done. Here a collective with ``async_op=True`` runs at
once, in issue order on its group, and returns a completed :class:`Work`; since
JAX arrays are immutable the result is ``work.result()`` (or
``work.get_future().value()``), the array the blocking call would have returned.
An ``isend``/``irecv`` is queued instead (see ``p2p``): its :class:`Work` runs the
queued point-to-point calls when it is waited on (``wait``, ``is_completed``,
``result``, or its future's ``wait``/``value``/``done``).

Example:
  >>> w = Work.completed(41)
  >>> w.wait(), w.is_completed(), w.result()
  (True, True, 41)
  >>> w.get_future().then(lambda fut: fut.value() + 1).wait()
  42
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["Future", "Work"]

_PENDING, _DONE, _FAILED = 0, 1, 2


class Future:
    """The result of a :class:`Work` (the shape of ``tensorplay.futures.Future``).

    Args:
      drive: called with a timeout (seconds or None) to make a pending future
        complete (runs the queued point-to-point calls); None for a future that
        completes by itself.

    Example:
      >>> f = Future()
      >>> g = f.then(lambda fut: fut.wait() * 2)
      >>> f.set_result(21)
      >>> g.value(), g.done()
      (42, True)
    """

    def __init__(self, drive: Callable[[float | None], None] | None = None) -> None:
        self._state = _PENDING
        self._value: Any = None
        self._callbacks: list[Callable[[Future], None]] = []
        self._drive = drive

    def done(self) -> bool:
        """Whether a value or an exception is set (a pending send/recv runs first).

        Example:
          >>> Future().done()
          False
        """
        self._run(None)
        return self._state != _PENDING

    def wait(self, timeout: float | None = None) -> Any:
        """The value, once set; raises the call's exception if it failed.

        Args:
          timeout: seconds a pending send/recv may take (None: the group's timeout).

        Raises:
          RuntimeError: the future cannot complete (nothing will set it).

        Example:
          >>> f = Future(); f.set_result("x"); f.wait()
          'x'
        """
        self._run(timeout)
        if self._state == _PENDING:
            raise RuntimeError("Future.wait: not done, and nothing in this process will set it")
        if self._state == _FAILED:
            raise self._value
        return self._value

    def value(self) -> Any:
        """As :meth:`wait`.

        Example:
          >>> f = Future(); f.set_result(3); f.value()
          3
        """
        return self.wait()

    def then(self, callback: Callable[[Future], Any]) -> Future:
        """A future of ``callback(self)``, run once this one is done.

        Example:
          >>> f = Future(); g = f.then(lambda fut: fut.value() + 1); f.set_result(1); g.wait()
          2
        """
        child = Future(self._run)

        def fire(fut: Future) -> None:
            try:
                child.set_result(callback(fut))
            except BaseException as e:  # the callback's error belongs to the child
                child.set_exception(e)

        if self._state == _PENDING:
            self._callbacks.append(fire)
        else:
            fire(self)
        return child

    def set_result(self, value: Any) -> None:
        """Complete with ``value`` and run the callbacks.

        Example:
          >>> f = Future(); f.set_result(None); f.done()
          True
        """
        self._finish(_DONE, value)

    def set_exception(self, exc: BaseException) -> None:
        """Complete with ``exc`` (raised by :meth:`wait`) and run the callbacks.

        Example:
          >>> f = Future(); f.set_exception(ValueError("no")); f.done()
          True
        """
        self._finish(_FAILED, exc)

    def _finish(self, state: int, value: Any) -> None:
        if self._state != _PENDING:
            raise RuntimeError("Future: already completed")
        self._state, self._value = state, value
        callbacks, self._callbacks = self._callbacks, []
        for cb in callbacks:
            cb(self)

    def _run(self, timeout: float | None) -> None:
        if self._state == _PENDING and self._drive is not None:
            self._drive(timeout)


class Work:
    """A handle on an asynchronous process-group call (``tensorplay.distributed.Work``).

    Example:
      >>> w = Work.completed([1, 2])
      >>> w.wait(), w.result(), w.exception()
      (True, [1, 2], None)
    """

    def __init__(self, future: Future) -> None:
        self._future = future

    @classmethod
    def completed(cls, result: Any) -> Work:
        """A finished call whose result is ``result``.

        Example:
          >>> Work.completed(0).is_completed()
          True
        """
        f = Future()
        f.set_result(result)
        return cls(f)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the call is done; True, or the call's exception.

        Args:
          timeout: seconds a queued send/recv may take (None: the group's timeout).

        Example:
          >>> Work.completed(None).wait(timeout=5)
          True
        """
        self._future.wait(timeout)
        return True

    def is_completed(self) -> bool:
        """Whether the call is done (a queued send/recv runs first, so this may block).

        Example:
          >>> Work.completed(None).is_completed()
          True
        """
        return self._future.done()

    def is_success(self) -> bool:
        """Whether the call is done and did not fail.

        Example:
          >>> Work.completed(None).is_success()
          True
        """
        return self.is_completed() and self.exception() is None

    def exception(self) -> BaseException | None:
        """The call's exception, or None (waits first).

        Example:
          >>> Work.completed(1).exception() is None
          True
        """
        try:
            self._future.wait()
        except Exception as e:
            return e
        return None

    def result(self) -> Any:
        """What the blocking call returns (the received or reduced array; None for a send).

        Example:
          >>> Work.completed(7).result()
          7
        """
        return self._future.wait()

    def get_future(self) -> Future:
        """A :class:`Future` of :meth:`result`.

        Example:
          >>> Work.completed(7).get_future().value()
          7
        """
        return self._future

    def __repr__(self) -> str:
        state = ("pending", "done", "failed")[self._future._state]
        return f"Work({state})"
