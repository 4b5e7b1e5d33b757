"""Shared-memory primitives for same-host ranks: mapped segments, a tick barrier, aligned buffers.

A segment is a file in ``/dev/shm`` mapped by every rank of a group; its name is
unlinked as soon as every rank has mapped it, so nothing is left behind when a
process dies. Ranks synchronise through a row of int64 counters per rank in a
control segment (:class:`TickBarrier`): x86-64 keeps stores in order, so data
written before a counter is visible to a rank that has seen the counter.
Every wait has a deadline and checks that the peers' processes still live.
"""

from __future__ import annotations

import contextlib
import math
import mmap
import os
import secrets
import tempfile
import time

import numpy as np

from tensorplay_jax._constants import (
    PG_ALIGN,
    PG_LIVENESS_CHECK_S,
    PG_SHM_MAX_SLEEP_S,
    PG_SHM_SPIN_S,
)

__all__ = ["PeerDied", "Segment", "TickBarrier", "WaitTimeout", "aligned_empty", "shm_dir"]


class WaitTimeout(TimeoutError):
    """A shared-memory wait passed its deadline."""


class PeerDied(RuntimeError):
    """A rank's process exited while others waited for it."""


def shm_dir() -> str:
    """Where segments live: ``/dev/shm`` when present (RAM), else the temp directory."""
    return "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


class Segment:
    """A file-backed shared mapping of ``size`` bytes."""

    def __init__(self, path: str, size: int, *, create: bool):
        self.path = path
        self.size = size
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = os.open(path, flags, 0o600)
        try:
            if create:
                os.ftruncate(fd, size)
            self.mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self.buf = np.frombuffer(self.mm, dtype=np.uint8)

    @classmethod
    def create(cls, tag: str, size: int) -> Segment:
        """A new segment with a fresh random name."""
        path = os.path.join(shm_dir(), f"tpjax-{tag}-{os.getpid()}-{secrets.token_hex(6)}")
        return cls(path, size, create=True)

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


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (an exited, not yet reaped "zombie" counts as dead)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except FileNotFoundError:
        return False
    except (OSError, IndexError):
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class TickBarrier:
    """Barrier over a row of monotonically increasing counters, one per rank.

    Args:
      ticks: int64 view with one counter per rank (shared).
      pids: int64 view with each rank's process id (shared).
      me: this rank's index.
      ranks: global ranks, for messages.
    """

    def __init__(self, ticks: np.ndarray, pids: np.ndarray, me: int, ranks: tuple[int, ...]):
        self.ticks = ticks
        self.pids = pids
        self.me = me
        self.ranks = ranks
        self.tick = int(ticks[me])

    def arrive(self) -> int:
        """Announce arrival at the next barrier; return its tick."""
        self.tick += 1
        self.ticks[self.me] = self.tick
        return self.tick

    def wait(self, tick: int, deadline: float, what: str) -> None:
        """Wait until every rank has arrived at ``tick``.

        Raises:
          WaitTimeout: the deadline passed; the message names the missing ranks.
          PeerDied: a missing rank's process has exited.
        """
        ticks = self.ticks
        if ticks.min() >= tick:
            return
        start = time.monotonic()
        next_check = start + PG_LIVENESS_CHECK_S
        sleep = 0.0
        while ticks.min() < tick:
            now = time.monotonic()
            if now - start < PG_SHM_SPIN_S:
                os.sched_yield()
                continue
            if now > deadline:
                late = [self.ranks[i] for i in np.flatnonzero(ticks < tick)]
                raise WaitTimeout(f"{what}: timed out waiting for rank(s) {late}")
            if now > next_check:
                next_check = now + PG_LIVENESS_CHECK_S
                for i in np.flatnonzero(ticks < tick):
                    if not _alive(int(self.pids[i])):
                        raise PeerDied(
                            f"{what}: rank {self.ranks[i]} (pid {int(self.pids[i])}) exited "
                            "while this rank waited for it"
                        )
            sleep = min(PG_SHM_MAX_SLEEP_S, max(50e-6, sleep * 2))
            time.sleep(sleep)

    def sync(self, deadline: float, what: str) -> None:
        """``arrive`` then ``wait``."""
        self.wait(self.arrive(), deadline, what)


def aligned_empty(shape: tuple[int, ...], dtype: np.dtype, *, zero: bool = False) -> np.ndarray:
    """A fresh C-contiguous array whose data is ``PG_ALIGN``-byte aligned.

    ``jax.device_put`` of such a host array aliases it instead of copying.
    """
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    raw = (np.zeros if zero else np.empty)(nbytes + PG_ALIGN, np.uint8)
    off = (-raw.ctypes.data) % PG_ALIGN
    return raw[off : off + nbytes].view(dtype).reshape(shape)
