"""What a worker's RPC has in flight: calls waiting for replies, requests being served.

One :class:`InFlight` per agent, shared by its parts: the calling side
(``_agent``) adds pending calls, the receiving side (``_dispatch``) completes
them and counts the requests it serves, and the shutdown barrier
(``_shutdown``) waits until nothing is left. Its lock is the agent's, made and
owned by ``_peers.Peers`` (calls are recorded with the links they go on).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tensorplay_jax.rpc._call_hooks import CallInfo
    from tensorplay_jax.rpc._futures import Future
    from tensorplay_jax.rpc._link import Link
    from tensorplay_jax.rpc._types import WorkerInfo

__all__ = ["InFlight", "Pending"]


class Pending:
    """A call sent and not answered yet: its future, destination, hook info and timeout."""

    __slots__ = ("fut", "info", "link", "timeout", "to", "traced")

    def __init__(self, fut: Future, to: WorkerInfo, info: CallInfo, timeout: float) -> None:
        self.fut, self.to, self.info, self.timeout = fut, to, info, timeout
        self.link: Link | None = None
        self.traced: str | None = None  # its name in a trace, when the profiler records it


class InFlight:
    """The calls and served requests of one agent (see the module docstring).

    Args:
      lock: the agent's lock (``Peers.lock``); hold it to read or change anything here.

    Attributes:
      lock: that lock.
      pending: message id -> the :class:`Pending` call it answers.
      serving: requests being served now (their replies not sent yet).
      orphaned: those of them whose caller's link closed (their replies go nowhere):
        the shutdown barrier does not wait for them.
      handled: messages sent and received so far; the shutdown barrier compares it
        between rounds to see whether anything moved.

    Example:
      >>> f = InFlight(threading.Lock())
      >>> f.outstanding(), f.detail()
      (0, '0 call(s) waiting for a reply, 0 request(s) being served')
    """

    def __init__(self, lock: threading.Lock) -> None:
        self.lock = lock
        self.pending: dict[int, Pending] = {}
        self.serving = 0
        self.orphaned = 0
        self.handled = 0
        self._serving_for: dict[Link, int] = {}  # requests being served, by caller's link
        self._orphans: dict[Link, int] = {}  # those whose link closed, by link

    def serve_begin(self, link: Link) -> None:
        """A request from ``link`` is being served (hold the lock)."""
        self.serving += 1
        self._serving_for[link] = self._serving_for.get(link, 0) + 1

    def serve_end(self, link: Link) -> None:
        """A request from ``link`` was served (hold the lock)."""
        self.serving -= 1
        counts = self._orphans if link in self._orphans else self._serving_for
        if link in counts:
            counts[link] -= 1
            if counts is self._orphans:
                self.orphaned -= 1
            if not counts[link]:
                del counts[link]

    def link_closed(self, link: Link) -> None:
        """``link`` closed: what is served for it now is no one's to wait for (hold the lock)."""
        n = self._serving_for.pop(link, 0)
        if n:
            self._orphans[link] = n
            self.orphaned += n

    def take(self, which: Callable[[Pending], bool]) -> list[Pending]:
        """Remove and return the pending calls ``which`` selects (hold the lock)."""
        mids = [m for m, p in self.pending.items() if which(p)]
        return [self.pending.pop(m) for m in mids]

    def outstanding(self) -> int:
        """Calls waiting for a reply plus requests being served for callers still there."""
        return len(self.pending) + self.serving - self.orphaned

    def detail(self) -> str:
        """What :meth:`outstanding` counts, in words."""
        gone = f" ({self.orphaned} more for callers that are gone)" if self.orphaned else ""
        return (
            f"{len(self.pending)} call(s) waiting for a reply, "
            f"{self.serving - self.orphaned} request(s) being served{gone}"
        )
