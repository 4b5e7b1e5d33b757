"""Shared-memory segments of the same-host transport: staging, mapping, and the reuse pool.

Buffers beyond the inline limit travel in one ``memfd`` segment (at 64-byte
aligned offsets) whose descriptor is passed with the frame.

- The receiver maps the segment and its arrays are views on it (no copy on
  the receiving side). A segment is refused (as malformed) unless it is
  sealed against shrinking (``F_SEAL_SHRINK``: its sender could otherwise
  truncate it under the receiver's arrays, which then fault with SIGBUS;
  ours are sealed at creation, and never resized), or if it has fewer pages
  written than its buffers span (mapping it would make the receiver allocate
  memory for bytes that never came).
- Once the last of its arrays is gone the receiver sends RELEASE, and the
  sender puts the segment in a pool of this process (up to ``_POOL_BYTES``)
  to reuse: writing into pages the kernel already allocated is several times
  faster. Every segment is a memfd, so the kernel frees it when no process
  holds a descriptor or mapping, even if a peer is killed.
"""

from __future__ import annotations

import mmap
import os
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

try:
    import fcntl
except ImportError:  # not POSIX: this transport is unavailable there
    fcntl = None  # type: ignore[assignment]

from tensorplay_jax.rpc._framing import FramingError
from tensorplay_jax.runtime.settings import HOST_ALIGN

_SEGMENT_GRAIN = 1 << 20
_POOL_BYTES = 512 << 20  # released segments this process keeps for reuse, at most
_WRITE_MAX = 1 << 30
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)


def _offsets(sizes: Sequence[int]) -> list[int]:
    """Start of each buffer in a segment, and its total size last."""
    offs, pos = [], 0
    for n in sizes:
        offs.append(pos)
        pos += -(-n // HOST_ALIGN) * HOST_ALIGN
    offs.append(pos)
    return offs


class _Pool:
    """Released segments of this process, kept for reuse: writing into pages the kernel
    has already allocated is several times faster than into fresh ones."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._free: list[tuple[int, int]] = []  # (size, fd)
        self._bytes = 0
        self._lock = threading.Lock()

    def take(self, n: int) -> tuple[int, int]:
        """A segment (fd, size) of at least n bytes: a free one not much larger, else a new one."""
        with self._lock:
            fits = [seg for seg in self._free if n <= seg[0] <= 2 * n + _SEGMENT_GRAIN]
            if fits:
                seg = min(fits)
                self._free.remove(seg)
                self._bytes -= seg[0]
                return seg[1], seg[0]
        size = -(-n // _SEGMENT_GRAIN) * _SEGMENT_GRAIN
        fd = os.memfd_create("tpj-rpc", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, size)
            # Its size is fixed for good (a pooled segment is reused as it is, never
            # resized): receivers refuse a segment that could shrink under their arrays,
            # and no receiver can add seals of its own (F_SEAL_WRITE would stop our writes).
            fcntl.fcntl(
                fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
            )
        except BaseException:
            os.close(fd)
            raise
        return fd, size

    def give(self, fd: int, size: int) -> None:
        with self._lock:
            if self._bytes + size <= self._limit:
                self._free.append((size, fd))
                self._bytes += size
                return
        os.close(fd)


_pool = _Pool(_POOL_BYTES)


def _fill(fd: int, buffers: Sequence[Any]) -> None:
    """Write ``buffers`` into the segment ``fd`` at their ``_offsets``."""
    offs = _offsets([b.nbytes for b in buffers])
    for b, off in zip(buffers, offs, strict=False):
        mv = memoryview(b)
        if mv.format != "B" or mv.ndim != 1:
            mv = mv.cast("B")
        pos = 0
        while pos < mv.nbytes:
            pos += os.pwrite(fd, mv[pos : pos + _WRITE_MAX], off + pos)


def _map(fd: int, sizes: Sequence[int], on_free: Callable[[], None]) -> list[Any]:
    """Map a received segment (and close ``fd``); one writable uint8 array per buffer.

    ``on_free`` runs once no array on the segment is left (it must not take locks).
    """
    offs = _offsets(sizes)
    try:
        # Unsealed, its sender could shrink it under our arrays: reading them would SIGBUS.
        if not _sealed_against_shrinking(fd):
            raise FramingError(
                "shared-memory segment is not sealed against shrinking (F_SEAL_SHRINK)"
            )
        st = os.fstat(fd)
        if st.st_size < offs[-1]:
            raise FramingError("shared-memory segment smaller than its buffers")
        # The sender wrote every page up to the end of its last buffer. Populating pages
        # it never wrote would allocate memory here for bytes that never came; the kernel
        # counts a memfd's allocated pages (no extra system call: unlike SEEK_HOLE, which
        # costs a quarter of the mapping).
        if st.st_blocks * 512 < offs[-1]:
            raise FramingError("shared-memory segment has fewer bytes written than its buffers")
        m = mmap.mmap(fd, offs[-1], flags=mmap.MAP_SHARED | _POPULATE)
    finally:
        os.close(fd)
    weakref.finalize(m, on_free)
    return [
        np.frombuffer(m, np.uint8, count=n, offset=o) if n else np.empty(0, np.uint8)
        for n, o in zip(sizes, offs, strict=False)
    ]


def _sealed_against_shrinking(fd: int) -> bool:
    try:
        return bool(fcntl.fcntl(fd, fcntl.F_GET_SEALS) & fcntl.F_SEAL_SHRINK)
    except OSError:  # not a memfd (or any file that takes seals)
        return False
