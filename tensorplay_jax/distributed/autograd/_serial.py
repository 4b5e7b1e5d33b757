"""One context's local backward runs on one worker, one at a time and in arrival order.

Distributed autograd's engine (``_engine``) submits every local run of a pass
here: the runs that gradient messages for one context start on this worker
queue behind each other instead of sharing the CPU, so in a pipeline the
first micro-batch's gradients are done, and sent on, first.
"""

from __future__ import annotations

import collections
import logging
import threading
import weakref
from collections.abc import Callable

from tensorplay_jax.distributed.autograd._context import DistAutogradContext

__all__ = ["Serial", "serial_for"]

log = logging.getLogger(__name__)


class Serial:
    """Runs the local passes of one context on this worker one at a time, in arrival order.

    A thread that submits while nothing runs runs its unit itself (no thread
    hand-off for the common single message); one that submits while another
    runs leaves its unit queued and returns at once. Work a unit submits from
    inside itself (a reply handled inline) queues behind it, so it never nests,
    and runs next in the same thread. When the next unit is another thread's,
    a fresh thread drains the rest: the submitter returns to its own caller
    (an RPC handler replies with the gradients its unit computed) instead of
    doing the others' work first. Each unit handles its own errors.

    Example:
        >>> order = []
        >>> s = Serial()
        >>> s.submit(lambda: (order.append(1), s.submit(lambda: order.append(2))))
        >>> order
        [1, 2]
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: collections.deque[tuple[int, Callable[[], None]]] = collections.deque()
        self._running = False

    def submit(self, unit: Callable[[], None]) -> None:
        """Run ``unit`` after the units queued before it: here if none runs, else later."""
        me = threading.get_ident()
        with self._lock:
            self._queue.append((me, unit))
            if self._running:
                return
            self._running = True
        self._drain(me)

    def _drain(self, owner: int | None) -> None:
        """Run queued units; a submitter (``owner``) runs only its own, then hands off."""
        while True:
            with self._lock:
                if not self._queue:
                    self._running = False
                    return
                if owner is not None and self._queue[0][0] != owner:
                    threading.Thread(
                        target=self._drain, args=(None,), name="dist_autograd-serial", daemon=True
                    ).start()
                    return
                _, unit = self._queue.popleft()
            try:
                unit()
            except Exception:  # units report their own errors; this one escaped
                log.exception("dist_autograd: a queued backward run raised")


_serials: weakref.WeakKeyDictionary[DistAutogradContext, Serial] = weakref.WeakKeyDictionary()
_serials_lock = threading.Lock()


def serial_for(ctx: DistAutogradContext) -> Serial:
    """The queue of ``ctx``'s local runs on this worker (made on first use, gone with ``ctx``).

    Example:
        >>> from tensorplay_jax.distributed.autograd._context import DistAutogradContext
        >>> ctx = DistAutogradContext(5)
        >>> serial_for(ctx) is serial_for(ctx)
        True
    """
    serial = _serials.get(ctx)
    if serial is None:
        with _serials_lock:
            serial = _serials.get(ctx)
            if serial is None:
                serial = _serials[ctx] = Serial()
    return serial
