"""Shared-memory primitives for same-host ranks: mapped segments and a tick barrier.

A segment is a file in ``/dev/shm`` mapped by every rank of a group; its name is
unlinked as soon as every rank has mapped it, so nothing is left behind when a
process dies. A rank maps a segment that a peer made only after checking that it
is one this user's ranks would make (:meth:`Segment.attach`): the name reaches it
through the coordination store, which outsiders can write to. Ranks synchronise
through a row of int64 counters per rank in a control segment (:class:`TickBarrier`):
x86-64 keeps stores in order, so data written before a counter is visible to a
rank that has seen the counter.
Every wait has a deadline and checks that the peers' processes still live.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import mmap
import os
import platform
import re
import secrets
import stat
import sys
import tempfile
import time

import numpy as np

from tensorplay_jax.runtime import settings, trace
from tensorplay_jax.runtime.launch import pid_alive
from tensorplay_jax.runtime.settings import (
    PG_LIVENESS_CHECK_S,
    PG_SHM_MAX_SLEEP_S,
    SHM_NO_FUTEX_ENV,
    SHM_SPIN_ENV,
)

__all__ = ["PeerDied", "Segment", "TickBarrier", "WaitTimeout", "shm_dir"]


class WaitTimeout(TimeoutError):
    """A shared-memory wait passed its deadline."""


class PeerDied(RuntimeError):
    """A rank's process exited while others waited for it."""


def shm_dir() -> str:
    """Where segments live: ``/dev/shm`` when present (RAM), else the temp directory."""
    return "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


_NAME = re.compile(r"tpjax-(ctrl|data)-[0-9]+-[0-9a-f]{12}")  # what Segment.create names


class Segment:
    """A file-backed shared mapping of ``size`` bytes (from :meth:`create` or :meth:`attach`)."""

    def __init__(self, path: str, size: int, fd: int):
        self.path = path
        self.size = size
        self.mm = mmap.mmap(fd, size)
        self.buf = np.frombuffer(self.mm, dtype=np.uint8)

    @classmethod
    def create(cls, tag: str, size: int) -> Segment:
        """A new segment with a fresh random name, readable by this user only."""
        path = os.path.join(shm_dir(), f"tpjax-{tag}-{os.getpid()}-{secrets.token_hex(6)}")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.ftruncate(fd, size)
            return cls(path, size, fd)
        finally:
            os.close(fd)

    @classmethod
    def attach(cls, path: str, size: int, fn: str) -> Segment:
        """Map a segment that a peer rank made, once it is certain to be one.

        It must have the name :meth:`create` gives, lie in :func:`shm_dir`, be a
        regular file (not a symbolic link) of exactly ``size`` bytes, belong to this
        user and be closed to others (mode 600).

        Raises:
          PermissionError: ``path`` fails one of these checks (named in the message).
        """

        def refuse(why: str):
            raise PermissionError(
                f"{fn}: refused the shared-memory segment {path!r}: {why}. Segment names "
                "reach a rank through the coordination store, which anything that reaches "
                "the coordinator port can write to; only this job's ranks (this user) make "
                "segments."
            )

        if not _NAME.fullmatch(os.path.basename(path)):
            refuse("its name is not a tensorplay_jax segment's (tpjax-<ctrl|data>-<pid>-<hex>)")
        if os.path.dirname(path) != shm_dir():
            refuse(f"it is not in {shm_dir()}")
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
        except OSError as e:
            if e.errno == errno.ELOOP:
                refuse("it is a symbolic link")
            raise
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                refuse("it is not a regular file")
            if st.st_uid != os.getuid():
                refuse(f"it belongs to uid {st.st_uid}, not to this user (uid {os.getuid()})")
            if st.st_mode & 0o077:
                refuse(f"it has mode {stat.S_IMODE(st.st_mode):o}; this user's segments have 600")
            if st.st_size != size:
                refuse(f"it has {st.st_size} bytes, expected {size}")
            return cls(path, size, fd)
        finally:
            os.close(fd)

    def unlink(self) -> None:
        """Remove the name (mappings stay valid)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def close(self) -> None:
        """Drop this process's mapping (views into it must be gone)."""
        self.buf = None
        # BufferError: a view is still alive; the mapping then goes with the process.
        with contextlib.suppress(BufferError):
            self.mm.close()


def _futex_api():
    """``(wait, wake)`` over Linux futexes on shared memory, or None elsewhere."""
    nr = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98}.get(platform.machine().lower())
    if sys.platform != "linux" or nr is None:
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        syscall = libc.syscall
    except (OSError, AttributeError):
        return None
    syscall.restype = ctypes.c_long

    class _Timespec(ctypes.Structure):
        _fields_ = (("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long))

    def wait(addr: int, expected: int, timeout_s: float) -> None:
        # FUTEX_WAIT (0, shared): sleep while *addr == expected, at most timeout_s.
        ts = _Timespec(int(timeout_s), int((timeout_s % 1) * 1e9))
        syscall(nr, ctypes.c_void_p(addr), 0, ctypes.c_int(expected), ctypes.byref(ts), None, 0)

    def wake(addr: int) -> None:
        # FUTEX_WAKE (1, shared): wake every waiter on addr.
        syscall(nr, ctypes.c_void_p(addr), 1, ctypes.c_int(2**31 - 1), None, None, 0)

    return wait, wake


_FUTEX = None if settings.raw(SHM_NO_FUTEX_ENV) else _futex_api()
_SPIN_S = settings.get_float(SHM_SPIN_ENV)


class TickBarrier:
    """Barrier over a row of monotonically increasing counters, one per rank.

    A waiting rank sleeps on its own *doorbell* word (a Linux futex in the shared
    segment, where available; short sleeps elsewhere). An arriving rank writes its
    counter, then a token unique to this arrival into every other rank's doorbell,
    then wakes them: a waiter reads its doorbell before checking the counters, so
    an arrival it missed has changed the doorbell and its futex wait returns at once.

    Args:
      ticks: int64 view with one counter per rank (shared).
      pids: int64 view with each rank's process id (shared).
      bells: int32 view with one doorbell per rank (shared, 4-byte aligned).
      me: this rank's index.
      ranks: global ranks, for messages.
    """

    def __init__(
        self,
        ticks: np.ndarray,
        pids: np.ndarray,
        bells: np.ndarray,
        me: int,
        ranks: tuple[int, ...],
    ):
        self.ticks = ticks
        self.pids = pids
        self.bells = bells
        self.me = me
        self.ranks = ranks
        self.tick = int(ticks[me])
        n = len(ranks)
        self._bell_addr = [bells[i : i + 1].ctypes.data for i in range(n)]
        self._others = [i for i in range(n) if i != me]

    def arrive(self) -> int:
        """Announce arrival at the next barrier (and ring the others); return its tick."""
        self.tick += 1
        self.ticks[self.me] = self.tick
        if _FUTEX is not None and self._others:
            token = (self.tick * len(self.ranks) + self.me) & 0x7FFFFFFF
            wake, bells = _FUTEX[1], self.bells
            for i in self._others:
                bells[i] = token
            for i in self._others:
                wake(self._bell_addr[i])
        return self.tick

    def wait(self, tick: int, deadline: float, what: str) -> None:
        """Wait until every rank has arrived at ``tick``.

        Raises:
          WaitTimeout: the deadline passed; the message names the missing ranks.
          PeerDied: a missing rank's process has exited.
        """
        if self.ticks.min() >= tick:
            return
        if not trace.RECORDING:
            self._wait(tick, deadline, what)
            return
        with trace.span(f"wait {what}", "pg"):  # the profiler's wait, beside the transfer
            self._wait(tick, deadline, what)

    def _wait(self, tick: int, deadline: float, what: str) -> None:
        ticks = self.ticks
        start = time.monotonic()
        next_check = start + PG_LIVENESS_CHECK_S
        sleep = 0.0
        while True:
            bell = int(self.bells[self.me])
            if ticks.min() >= tick:
                return
            now = time.monotonic()
            if now - start < _SPIN_S:
                os.sched_yield()
                continue
            if now > deadline:
                late = [self.ranks[i] for i in np.flatnonzero(ticks < tick)]
                raise WaitTimeout(f"{what}: Timed out waiting for rank(s) {late}")
            if now > next_check:
                next_check = now + PG_LIVENESS_CHECK_S
                for i in np.flatnonzero(ticks < tick):
                    if not pid_alive(int(self.pids[i])):
                        raise PeerDied(
                            f"{what}: rank {self.ranks[i]} (pid {int(self.pids[i])}) exited "
                            "while this rank waited for it"
                        )
            if _FUTEX is not None:
                _FUTEX[0](self._bell_addr[self.me], bell, PG_LIVENESS_CHECK_S)
            else:
                sleep = min(PG_SHM_MAX_SLEEP_S, max(50e-6, sleep * 2))
                time.sleep(sleep)

    def sync(self, deadline: float, what: str) -> None:
        """``arrive`` then ``wait``."""
        self.wait(self.arrive(), deadline, what)
