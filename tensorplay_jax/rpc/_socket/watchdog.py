"""The watchdog that relieves a socket link's reading thread when one frame's work runs long.

Reading: one thread at a time reads a link, and it does the work of each
frame itself (serves the call, runs the reply's callbacks): a thread hand-off
costs more than a small call. So that a long or blocking job never stalls the
frames behind it, a watchdog thread per process hands reading to a spare
thread once one frame's work has run for ``RPC_INLINE_DETACH_S``; the busy
thread joins the spares when its job ends.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from tensorplay_jax.runtime.settings import (
    RPC_INLINE_CHECK_S,
    RPC_INLINE_DETACH_S,
    RPC_INLINE_PARK_S,
)

if TYPE_CHECKING:  # the link imports this module
    from tensorplay_jax.rpc._socket.link import SocketLink

log = logging.getLogger(__name__)

_reading = threading.local()


def on_reader_thread() -> bool:
    """True in a thread doing a frame's work for a link (the watchdog detaches it if slow).

    Example:
      >>> on_reader_thread()  # not a link's reading thread
      False
    """
    return getattr(_reading, "active", False)


class _Watchdog:
    """Hands a link's reading to a spare thread when one frame's work runs too long.

    One thread per process. It checks every ``RPC_INLINE_CHECK_S`` while frames
    are being handled and parks after ``RPC_INLINE_PARK_S`` without any; the
    next frame wakes it (one wake-up per busy spell, not per frame).
    """

    def __init__(self) -> None:
        self._links: set[SocketLink] = set()
        self._cv = threading.Condition()
        self._parked = False
        self._seen = False  # a frame started since the last check
        self._thread: threading.Thread | None = None

    def watch(self, link: SocketLink) -> None:
        with self._cv:
            self._links.add(link)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="tpj-rpc-socket-watchdog", daemon=True
                )
                self._thread.start()

    def unwatch(self, link: SocketLink) -> None:
        with self._cv:
            self._links.discard(link)

    def poke(self) -> None:
        """A frame's work starts (its link's ``_busy_since`` is already set)."""
        self._seen = True
        if self._parked:
            with self._cv:
                self._cv.notify()

    def _busy(self) -> bool:
        return any(link._busy_since is not None for link in self._links)

    def _run(self) -> None:
        while True:
            try:
                self._watch()
            except Exception:  # never leave links unwatched
                log.exception("rpc: socket watchdog error")
                time.sleep(RPC_INLINE_CHECK_S)

    def _detach_slow(self) -> None:
        # A method of its own: its list of links is gone when it returns, so a parked
        # watchdog keeps no closed link (and the buffers it held) alive.
        now = time.monotonic()
        with self._cv:
            links = list(self._links)
        for link in links:
            since = link._busy_since
            if since is not None and now - since >= RPC_INLINE_DETACH_S:
                link._detach_busy(since)

    def _watch(self) -> None:
        quiet = 0.0
        while True:
            time.sleep(RPC_INLINE_CHECK_S)
            self._detach_slow()
            if self._seen or self._busy():
                self._seen, quiet = False, 0.0
                continue
            quiet += RPC_INLINE_CHECK_S
            if quiet < RPC_INLINE_PARK_S:
                continue
            with self._cv:
                self._parked = True
                # A frame that started before _parked was visible is seen here.
                while not self._seen and not self._busy():
                    self._cv.wait(1.0)
                self._parked = False
            quiet = 0.0


_watchdog = _Watchdog()
