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

from typing import Any

from tensorplay_jax.futures import Future

__all__ = ["Future", "Work"]


class Work:
    """A handle on an asynchronous process-group call (``tensorplay.distributed.Work``).

    Example:
      >>> w = Work.completed([1, 2])
      >>> w.wait(), w.result(), w.exception()
      (True, [1, 2], None)
    """

    _source: int | None = None  # a ProcessGroup.recv's source, as a group rank

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
        """The call's exception, or None (waits first; the exception is not raised here,
        so it keeps no traceback of this caller's frames).

        Example:
          >>> Work.completed(1).exception() is None
          True
        """
        return self._future.exception()

    def result(self) -> Any:
        """What the blocking call returns (the received or reduced array; None for a send).

        Example:
          >>> Work.completed(7).result()
          7
        """
        return self._future.wait()

    def source_rank(self) -> int:
        """The group rank a ``ProcessGroup.recv`` received from.

        Raises:
          RuntimeError: the Work is not a receive's.

        Example:
          >>> Work.completed(None).source_rank()
          Traceback (most recent call last):
          ...
          RuntimeError: source_rank() may only be called on the Work of a ProcessGroup.recv
        """
        if self._source is None:
            raise RuntimeError(
                "source_rank() may only be called on the Work of a ProcessGroup.recv"
            )
        return self._source

    def get_future(self) -> Future:
        """A :class:`~tensorplay_jax.futures.Future` of :meth:`result`.

        Example:
          >>> Work.completed(7).get_future().value()
          7
        """
        return self._future

    def __repr__(self) -> str:
        state = ("pending", "done", "failed")[self._future._state]
        return f"Work({state})"
