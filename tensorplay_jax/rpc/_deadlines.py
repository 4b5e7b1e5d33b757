"""Deadlines: one thread that calls back for each id whose deadline passed.

The agent fails calls whose timeout passed with it, and the RRef table drops
placeholders and parked messages that waited too long (see ``_rref_table``).
"""

from __future__ import annotations

import heapq
import threading
import time
from typing import Any

__all__ = ["Deadlines"]


class Deadlines:
    """One thread that calls ``expire(id)`` once an id's deadline passed (if still pending)."""

    def __init__(self, expire: Any, pending: dict[int, Any]) -> None:
        self._pending = pending  # finished calls stay in the heap until pruned or due
        self._heap: list[tuple[float, int]] = []
        self._cv = threading.Condition()
        self._expire = expire
        self._stopped = False
        threading.Thread(target=self._run, name="tpj-rpc-timeouts", daemon=True).start()

    def add(self, deadline: float, mid: int) -> None:
        with self._cv:
            if len(self._heap) > 4096 and len(self._heap) > 4 * len(self._pending):
                self._heap = [e for e in self._heap if e[1] in self._pending]
                heapq.heapify(self._heap)
            heapq.heappush(self._heap, (deadline, mid))
            if self._heap[0][1] == mid:
                self._cv.notify()

    def stop(self) -> None:
        with self._cv:
            self._stopped = True
            self._cv.notify()

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._stopped and (not self._heap or self._heap[0][0] > time.monotonic()):
                    self._cv.wait(self._heap[0][0] - time.monotonic() if self._heap else None)
                if self._stopped:
                    return
                _, mid = heapq.heappop(self._heap)
            self._expire(mid)
