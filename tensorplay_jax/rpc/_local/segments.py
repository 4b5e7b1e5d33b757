"""Shared-memory segments of the same-host transport: staging, mapping, and the reuse pool.

Buffers beyond the inline limit travel in one ``memfd`` segment (at 64-byte
aligned offsets) whose descriptor is passed with the frame.

- The sender writes a message's buffers through its own mapping of the
  segment (kept with the segment while it is pooled: a copy into pages
  already mapped, no system call). ``_fill_by_pwrite`` is the plain path it
  is checked against: ``pwrite`` of each buffer. A message of
  ``_PARALLEL_BYTES`` or more is copied by ``_fill_in_parallel``: its bytes
  cut into equal pieces, one per CPU this process may run on (at most
  ``_COPY_THREADS``), the caller copying one and a small pool of this
  process the others; one thread's copy cannot use the memory bandwidth of
  two cores. ``_fill`` is the one-thread path it is checked against.
- The receiver maps the segment and its arrays are views on it (no copy on
  the receiving side). It keeps the mapping for the next message on the
  same segment (``_Mappings``: by the memfd's inode, at most ``_POOL_BYTES``
  in all, a link's dropped when it closes), so a pooled segment is
  mapped and its pages populated once, not per message; ``_map`` is the
  plain path it is checked against, a fresh mapping per message. A segment
  is refused (as malformed) unless it is sealed against shrinking
  (``F_SEAL_SHRINK``: its sender could otherwise truncate it under the
  receiver's arrays, which then fault with SIGBUS; ours are sealed at
  creation, and never resized), or if it has fewer pages written than its
  buffers span (mapping it would make the receiver allocate memory for
  bytes that never came).
- Once the last of a message's arrays is gone (a wrapper array made for the
  message is collected: every view, and a ``jax.Array`` aliasing one, keeps
  it) the receiver sends RELEASE, and the sender puts the segment in a pool
  of this process (up to ``_POOL_BYTES``) to reuse: writing into pages the
  kernel already allocated is several times faster. Every segment is a
  memfd, so the kernel frees it when no process holds a descriptor or
  mapping, even if a peer is killed.
"""

from __future__ import annotations

import collections
import concurrent.futures
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
_PARALLEL_BYTES = 8 << 20  # messages this large or larger are copied by several threads
_COPY_THREADS = 4  # threads copying one message, at most (the caller among them)
_COPY_WAIT_S = 60.0  # a piece of a message another thread copies takes at most this long


def _offsets(sizes: Sequence[int]) -> list[int]:
    """Start of each buffer in a segment, and its total size last."""
    offs, pos = [], 0
    for n in sizes:
        offs.append(pos)
        pos += -(-n // HOST_ALIGN) * HOST_ALIGN
    offs.append(pos)
    return offs


class _Segment:
    """A segment this process made: its descriptor, its size, and a mapping to write through.

    Example:
        >>> seg = _Pool(0).take(100)
        >>> _fill(seg, [memoryview(b"abc")])
        >>> bytes(seg.memory()[:3]), seg.size
        (b'abc', 1048576)
        >>> seg.close()
    """

    __slots__ = ("_mem", "fd", "size")

    def __init__(self, fd: int, size: int) -> None:
        self.fd, self.size = fd, size
        self._mem: np.ndarray | None = None

    def memory(self) -> np.ndarray:
        """The segment's bytes, writable (mapped on first use, then kept with the segment)."""
        if self._mem is None:
            m = mmap.mmap(self.fd, self.size, flags=mmap.MAP_SHARED)
            self._mem = np.frombuffer(m, np.uint8)
        return self._mem

    def close(self) -> None:
        """Close the descriptor and let go of the mapping (unmapped once nothing views it)."""
        self._mem = None
        os.close(self.fd)


class _Pool:
    """Released segments of this process, kept for reuse: writing into pages the kernel
    has already allocated (and this process has mapped) is several times faster than
    into fresh ones."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._free: list[_Segment] = []
        self._bytes = 0
        self._lock = threading.Lock()

    def take(self, n: int) -> _Segment:
        """A segment of at least n bytes: a free one not much larger, else a new one.

        Of the free ones that fit, the smallest, and of those the last given back:
        its pages are the likeliest to be in cache, and its receiver may still
        hold its mapping (``_Mappings``).
        """
        with self._lock:
            fits = [seg for seg in self._free if n <= seg.size <= 2 * n + _SEGMENT_GRAIN]
            if fits:
                seg = min(reversed(fits), key=lambda f: f.size)
                self._free.remove(seg)
                self._bytes -= seg.size
                return seg
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
        return _Segment(fd, size)

    def give(self, seg: _Segment) -> None:
        """Keep ``seg`` for reuse, or close it if the pool is full."""
        with self._lock:
            if self._bytes + seg.size <= self._limit:
                self._free.append(seg)
                self._bytes += seg.size
                return
        seg.close()


_pool = _Pool(_POOL_BYTES)


def _bytes_of(b: Any) -> memoryview:
    mv = memoryview(b)
    return mv.cast("B") if mv.format != "B" or mv.ndim != 1 else mv


def _fill(seg: _Segment, buffers: Sequence[Any]) -> None:
    """Copy ``buffers`` into ``seg`` at their ``_offsets``, through its mapping."""
    mem = seg.memory()
    offs = _offsets([b.nbytes for b in buffers])
    for b, off in zip(buffers, offs, strict=False):
        mv = _bytes_of(b)
        if mv.nbytes:
            mem[off : off + mv.nbytes] = np.frombuffer(mv, np.uint8)  # the GIL is let go


def _pieces(sizes: Sequence[int], k: int) -> list[list[tuple[int, int, int]]]:
    """``k`` lists of ``(buffer, start, end)`` byte ranges, about equal in bytes, that cover
    buffers of ``sizes`` in order.

    Example:
        >>> _pieces([10, 0, 6], 2)
        [[(0, 0, 8)], [(0, 8, 10), (2, 0, 6)]]
    """
    total = sum(sizes)
    bounds = [total * j // k for j in range(k + 1)]
    out: list[list[tuple[int, int, int]]] = [[] for _ in range(k)]
    pos = 0  # of the current buffer's first byte in the message
    for i, n in enumerate(sizes):
        for j in range(k):
            a, b = max(bounds[j], pos), min(bounds[j + 1], pos + n)
            if a < b:
                out[j].append((i, a - pos, b - pos))
        pos += n
    return out


class _Copiers:
    """The threads that copy the pieces of large messages, started on first use.

    One pool per process (``_copiers``), ``_COPY_THREADS - 1`` threads at most:
    each message's caller copies one piece itself, so a message always moves,
    however many senders share the pool. Its threads only copy memory. A forked
    child starts a pool of its own (the parent's threads are not in it).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self.threads = max(1, min(_COPY_THREADS, len(os.sched_getaffinity(0))))
        os.register_at_fork(after_in_child=self._forget_pool)

    def _forget_pool(self) -> None:
        self._lock = threading.Lock()
        self._pool = None

    def submit(self, fn: Callable[..., None], *args: Any) -> concurrent.futures.Future[None] | None:
        """``fn(*args)`` on a pool thread; None when the pool takes no more work (the
        interpreter is exiting): the caller then runs it."""
        with self._lock:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    self.threads - 1, thread_name_prefix="tpj-rpc-copy"
                )
            try:
                return self._pool.submit(fn, *args)
            except RuntimeError:  # shut down at interpreter exit
                return None


_copiers = _Copiers()


def _copy_piece(
    mem: np.ndarray,
    offs: Sequence[int],
    views: Sequence[memoryview],
    piece: Sequence[tuple[int, int, int]],
) -> None:
    for i, a, b in piece:
        mem[offs[i] + a : offs[i] + b] = np.frombuffer(views[i], np.uint8)[a:b]


def _fill_in_parallel(seg: _Segment, buffers: Sequence[Any]) -> None:
    """What :func:`_fill` does, with a message of ``_PARALLEL_BYTES`` or more cut into
    pieces that ``_copiers``' threads and the caller copy at once."""
    sizes = [b.nbytes for b in buffers]
    k = _copiers.threads if sum(sizes) >= _PARALLEL_BYTES else 1
    if k < 2:
        _fill(seg, buffers)
        return
    mem, offs = seg.memory(), _offsets(sizes)
    views = [_bytes_of(b) for b in buffers]
    first, *rest = _pieces(sizes, k)
    futures = []
    for piece in rest:
        future = _copiers.submit(_copy_piece, mem, offs, views, piece)
        if future is None:
            _copy_piece(mem, offs, views, piece)
        else:
            futures.append(future)
    try:
        _copy_piece(mem, offs, views, first)
    finally:
        for future in futures:
            try:
                future.result(timeout=_COPY_WAIT_S)  # raises what the copy raised
            except concurrent.futures.TimeoutError:
                # The segment is dropped, not unmapped under the copy: the copy's
                # view keeps the mapping until it ends.
                raise OSError(f"copying a message took over {_COPY_WAIT_S:g} s") from None


def _fill_by_pwrite(fd: int, buffers: Sequence[Any]) -> None:
    """What :func:`_fill` does, by ``pwrite`` of each buffer (the plain path it is checked
    against)."""
    offs = _offsets([b.nbytes for b in buffers])
    for b, off in zip(buffers, offs, strict=False):
        mv = _bytes_of(b)
        pos = 0
        while pos < mv.nbytes:
            pos += os.pwrite(fd, mv[pos : pos + _WRITE_MAX], off + pos)


def _checked(fd: int, end: int) -> os.stat_result:
    """``fd``'s stat, if it is a segment a message may be mapped from up to byte ``end``.

    Raises:
      FramingError: it could shrink, or it is smaller than ``end``, or has fewer bytes
        written.
    """
    # Unsealed, its sender could shrink it under our arrays: reading them would SIGBUS.
    if not _sealed_against_shrinking(fd):
        raise FramingError("shared-memory segment is not sealed against shrinking (F_SEAL_SHRINK)")
    st = os.fstat(fd)
    if st.st_size < end:
        raise FramingError("shared-memory segment smaller than its buffers")
    # The sender wrote every page up to the end of its last buffer. Populating pages
    # it never wrote would allocate memory here for bytes that never came; the kernel
    # counts a memfd's allocated pages (no extra system call: unlike SEEK_HOLE, which
    # costs a quarter of the mapping).
    if st.st_blocks * 512 < end:
        raise FramingError("shared-memory segment has fewer bytes written than its buffers")
    return st


def _views(m: mmap.mmap, sizes: Sequence[int], on_free: Callable[[], None]) -> list[Any]:
    """One writable uint8 array per buffer on ``m``; ``on_free`` runs once none is left.

    They view one wrapper array made for this message (through a memoryview,
    which keeps it), so ``on_free`` follows this message's arrays, not the mapping.
    """
    offs = _offsets(sizes)
    wrapper = np.frombuffer(m, np.uint8, count=offs[-1])
    weakref.finalize(wrapper, on_free)
    mv = memoryview(wrapper)
    return [
        np.frombuffer(mv, np.uint8, count=n, offset=o) if n else np.empty(0, np.uint8)
        for n, o in zip(sizes, offs, strict=False)
    ]


def _map(fd: int, sizes: Sequence[int], on_free: Callable[[], None]) -> list[Any]:
    """Map a received segment (and close ``fd``); one writable uint8 array per buffer.

    The plain path :class:`_Mappings` is checked against: a fresh mapping per message.
    ``on_free`` runs once no array on the segment is left (it must not take locks).
    """
    end = _offsets(sizes)[-1]
    try:
        _checked(fd, end)
        m = mmap.mmap(fd, end, flags=mmap.MAP_SHARED | _POPULATE)
    finally:
        os.close(fd)
    return _views(m, sizes, on_free)


class _Mappings:
    """The peers' segments this process has mapped, kept for later messages on them.

    A sender reuses a segment (its pool) only after the receiver released it,
    so a mapping kept by the memfd's inode (which the mapping keeps from being
    reused) shows the next message on it. Each link end is an *owner* of the
    mappings it made. At most ``limit`` bytes stay mapped in all (the least
    recently used go first; arrays still on one keep it mapped); :meth:`clear`
    lets go of one owner's when its link closes.
    """

    def __init__(self, limit: int = _POOL_BYTES) -> None:
        self._limit = limit
        self._maps: collections.OrderedDict[tuple[int, int, int], mmap.mmap] = (
            collections.OrderedDict()
        )
        self._bytes = 0
        self._lock = threading.Lock()

    def map(
        self, owner: int, fd: int, sizes: Sequence[int], on_free: Callable[[], None]
    ) -> list[Any]:
        """What :func:`_map` gives (and it closes ``fd``), on a kept mapping when there is one."""
        end = _offsets(sizes)[-1]
        try:
            st = _checked(fd, end)
            key = (owner, st.st_dev, st.st_ino)
            with self._lock:
                m = self._maps.get(key)
                if m is not None:
                    self._maps.move_to_end(key)
            if m is None or len(m) < end:
                m = mmap.mmap(fd, end, flags=mmap.MAP_SHARED | _POPULATE)
                self._keep(key, m)
        finally:
            os.close(fd)
        return _views(m, sizes, on_free)

    def _keep(self, key: tuple[int, int, int], m: mmap.mmap) -> None:
        with self._lock:
            old = self._maps.pop(key, None)
            self._bytes -= len(old) if old is not None else 0
            if len(m) > self._limit:
                return
            self._maps[key] = m
            self._bytes += len(m)
            while self._bytes > self._limit:
                _, gone = self._maps.popitem(last=False)
                self._bytes -= len(gone)

    def kept(self, owner: int) -> int:
        """How many mappings ``owner`` has kept."""
        with self._lock:
            return sum(k[0] == owner for k in self._maps)

    def clear(self, owner: int) -> None:
        """Let go of ``owner``'s kept mappings (each unmapped once no array views it)."""
        with self._lock:
            for key in [k for k in self._maps if k[0] == owner]:
                self._bytes -= len(self._maps.pop(key))


_mapped = _Mappings()


def _sealed_against_shrinking(fd: int) -> bool:
    try:
        return bool(fcntl.fcntl(fd, fcntl.F_GET_SEALS) & fcntl.F_SEAL_SHRINK)
    except OSError:  # not a memfd (or any file that takes seals)
        return False
