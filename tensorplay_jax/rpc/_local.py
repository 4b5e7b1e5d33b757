"""The same-host transport: a Unix socket per pair of workers, large buffers in shared memory.

When caller and callee run on one host (and TLS is off), the agent talks over
this instead of its gRPC stream: a call costs two socket syscalls and no
gRPC thread hand-offs, and array bytes do not go through gRPC's copies.
gRPC stays the transport between hosts, with TLS, and whenever this one is
unavailable (no ``memfd_create``, ``TENSORPLAY_JAX_RPC_LOCAL=0``, or the
connection fails).

- The server listens in Linux's abstract socket namespace: there is no file
  to clean up if a worker dies.
- Authentication comes first. The server sends a random nonce; the client
  answers ``HMAC-SHA256(secret, "client" + nonce)`` and its own nonce; the
  server checks the MAC before it reads anything else (a wrong MAC closes the
  connection; nothing was decoded), then proves the secret back the same way.
- After that, frames: ``u64 body length``, ``u8 kind``, body. A body longer
  than the read buffer goes into its own mapping, which grows (doubling) with
  the bytes that arrive: a declared length takes no memory by itself. ``INLINE``
  (buffers up to 64 KiB): a ``_framing.pack_message`` message with its
  buffers. ``SHM``: ``u64 segment id``, then the message without buffer
  bytes; the buffers travel in one ``memfd`` segment (at 64-byte aligned
  offsets) passed with the frame by ``SCM_RIGHTS``. ``RELEASE``: ``u64``
  segment ids the receiver is done with.
- Passed descriptors: the sender passes a segment's with the first byte of its
  frame, and ``recvmsg`` returns no bytes past the first message that carried
  descriptors, so a descriptor belongs to the last frame that starts among the
  bytes its ``recvmsg`` returned. The reader gives it to that frame if it is
  an ``SHM`` frame and closes it otherwise (once a later frame starts past
  those bytes); more than ``_MAX_PENDING_FDS`` unclaimed at once (an honest
  peer leaves at most two) drops the link.
- Segments: the receiver maps the segment and its arrays are views on it (no
  copy on the receiving side). A segment is refused (as malformed) unless it
  is sealed against shrinking (``F_SEAL_SHRINK``: its sender could otherwise
  truncate it under the receiver's arrays, which then fault with SIGBUS;
  ours are sealed at creation, and never resized), or if it has fewer pages
  written than its buffers span (mapping it would make the receiver allocate
  memory for bytes that never came). Once the last of its arrays is gone it sends
  RELEASE, and the sender puts the segment in a pool of this process (up to
  ``_POOL_BYTES``) to reuse: writing into pages the kernel already allocated
  is several times faster. Every segment is a memfd, so the kernel frees it
  when no process holds a descriptor or mapping, even if a peer is killed;
  a closed link closes the descriptors of every segment it lent, and drops
  everything it holds at once (nothing keeps a dead link's buffers alive).
- Sends go straight to the socket from the sending thread (no hand-off); if
  the socket is full, the rest waits in a backlog that the link's writer
  thread drains in order, so a send never blocks.
- Reading: one thread at a time reads a link, and it does the work of each
  frame itself (serves the call, runs the reply's callbacks): a thread
  hand-off costs more than a small call. So that a long or blocking job never
  stalls the frames behind it, a watchdog thread per process hands reading to
  a spare thread once one frame's work has run for ``RPC_INLINE_DETACH_S``;
  the busy thread joins the spares when its job ends.
- Before a reader sleeps in ``recvmsg`` it yield-spins for the next frame, up
  to ``RPC_SPIN_US`` (``TENSORPLAY_JAX_RPC_SPIN_US``; 0 turns it off), in the
  optional C extension ``_spin`` with the GIL released (at most two threads
  per process at once). A call's reply or a backward's gradients usually come
  within that window, and catching them awake saves the wake-up of a sleeping
  CPU, which comes back with cold caches: on a 2-core VM that made
  distributed autograd's one-hop iteration 1.6x faster. Without the extension
  (no C compiler at install time) readers sleep at once.
"""

from __future__ import annotations

import array
import collections
import contextlib
import functools
import hashlib
import hmac
import itertools
import logging
import mmap
import os
import queue
import secrets
import socket
import struct
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

try:
    import fcntl
except ImportError:  # not POSIX: this transport is unavailable there
    fcntl = None  # type: ignore[assignment]

from tensorplay_jax._constants import (
    RPC_INLINE_CHECK_S,
    RPC_INLINE_DETACH_S,
    RPC_INLINE_PARK_S,
    RPC_SPIN_US,
)
from tensorplay_jax.rpc._framing import FramingError, Message, pack_message, unpack_message

__all__ = [
    "LocalLink",
    "LocalServer",
    "available",
    "connect_local",
    "host_id",
    "on_reader_thread",
]

log = logging.getLogger(__name__)

_ENV_SWITCH = "TENSORPLAY_JAX_RPC_LOCAL"  # "0" turns this transport off
_HANDSHAKE_TIMEOUT_S = 10.0
_MAGIC = b"TPJLOC01"
_NONCE = 32
_MAX_NAME = 512
_INLINE, _SHM, _RELEASE = 1, 2, 3
_U64 = struct.Struct("<Q")
_SEGMENT_GRAIN = 1 << 20
_POOL_BYTES = 512 << 20  # released segments this process keeps for reuse, at most
# Buffers beyond this go through shared memory: a socket of ~200 KiB passes a
# larger inline frame in several wake-ups of both sides, which cost more than a segment.
_INLINE_BYTES = 64 << 10
_FRAME = struct.Struct("<QB")
_U16 = struct.Struct("<H")
_ALIGN = 64
_READ_BYTES = 256 << 10  # the read buffer; a longer frame body is received on its own
_LARGE_FIRST = 1 << 20  # a longer body's first mapping; it doubles as bytes arrive
_WRITE_MAX = 1 << 30
_MAX_FDS = 8
_ANC = socket.CMSG_SPACE(_MAX_FDS * 4) if hasattr(socket, "CMSG_SPACE") else 0
# Passed descriptors no frame has claimed yet, at most (an honest peer leaves two: the
# frame being read's, and the next one's); more drops the link.
_MAX_PENDING_FDS = 2 * _MAX_FDS
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)
_NOSIGNAL = getattr(socket, "MSG_NOSIGNAL", 0)
_DONTWAIT = getattr(socket, "MSG_DONTWAIT", 0)
_SPIN_ENV = "TENSORPLAY_JAX_RPC_SPIN_US"  # microseconds a reader spins before it sleeps; 0: never


def _spinner() -> tuple[Callable[[int, int], bool] | None, int]:
    """The native yield-spin (optional C extension) and its budget in ns, or (None, 0)."""
    try:
        spin_us = float(os.environ.get(_SPIN_ENV, RPC_SPIN_US))
    except ValueError:
        log.warning("rpc: ignoring %s=%r (not a number)", _SPIN_ENV, os.environ[_SPIN_ENV])
        spin_us = RPC_SPIN_US
    if spin_us <= 0:
        return None, 0
    try:
        from tensorplay_jax.rpc._spin import spin_readable
    except ImportError:  # built without a C compiler: block at once
        return None, 0
    return spin_readable, int(spin_us * 1000)


_SPIN, _SPIN_NS = _spinner()

OnMessage = Callable[[Any, Message], None]
OnMalformed = Callable[[Any, Exception], None]
OnClosed = Callable[[Any, str], None]


def available() -> bool:
    """True where this transport works (Linux: abstract sockets, memfd, fd passing)."""
    return (
        sys.platform.startswith("linux")
        and hasattr(os, "memfd_create")
        and hasattr(fcntl, "F_ADD_SEALS")
        and hasattr(socket, "AF_UNIX")
        and _ANC > 0
        and os.environ.get(_ENV_SWITCH, "1") != "0"
    )


def host_id() -> str:
    """Names this host (kernel boot id + hostname); equal ids mean the socket is reachable."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return f"{boot}/{socket.gethostname()}"


def _mac(secret: bytes, role: bytes, nonce: bytes) -> bytes:
    return hmac.new(secret, role + nonce, hashlib.sha256).digest()


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        got = sock.recv(n - len(out))
        if not got:
            raise ConnectionError("connection closed during the handshake")
        out += got
    return bytes(out)


def _offsets(sizes: Sequence[int]) -> list[int]:
    """Start of each buffer in a segment, and its total size last."""
    offs, pos = [], 0
    for n in sizes:
        offs.append(pos)
        pos += -(-n // _ALIGN) * _ALIGN
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


class _Reader:
    """Frames (and passed descriptors) from one socket."""

    def __init__(self, sock: socket.socket, peer: str = "") -> None:
        self._sock = sock
        self._fd = sock.fileno()
        self._peer = peer
        self._buf = bytearray(_READ_BYTES)
        self._lo = self._hi = 0
        self._got = 0  # bytes received so far: the stream offset of the byte after _buf[_hi - 1]
        # Passed descriptors no frame has claimed yet: (fd, first, end), where [first, end)
        # are the stream offsets of the bytes received with it (see _claim).
        self.fds: collections.deque[tuple[int, int, int]] = collections.deque()
        self._warned = False

    def frame(self) -> tuple[int, bytes | mmap.mmap, int]:
        """The next frame: its kind, its body, and the descriptor passed with it (-1: none;
        only an ``SHM`` frame takes one, and the caller must close it)."""
        start = self._got - (self._hi - self._lo)
        self._need(_FRAME.size)
        length, kind = _FRAME.unpack_from(self._buf, self._lo)
        self._lo += _FRAME.size
        if length > _READ_BYTES:
            body: bytes | mmap.mmap = self._large(length)
        else:
            self._need(length)
            body = bytes(memoryview(self._buf)[self._lo : self._lo + length])
            self._lo += length
        return kind, body, self._claim(start, kind) if self.fds else -1

    def _claim(self, start: int, kind: int) -> int:
        """The descriptor of the ``SHM`` frame that starts at stream offset ``start`` (-1:
        none came with it); closes those no frame can claim any more.

        A sender passes a segment's descriptor with its frame's first byte, and recvmsg
        returns no bytes past the first message that carried descriptors: a descriptor
        belongs to the last frame starting among the bytes it came with. One that came
        wholly before this frame was claimed by none of the frames it could belong to.
        """
        fds = self.fds
        stale = 0
        while fds and fds[0][2] <= start:
            os.close(fds.popleft()[0])
            stale += 1
        if stale and not self._warned:
            self._warned = True  # once per link: a flood of them must not flood the log
            log.warning(
                "rpc: closed %d descriptor(s) that %s passed with frames that take none",
                stale,
                self._peer,
            )
        if kind == _SHM and fds and fds[0][1] <= start:
            return fds.popleft()[0]
        return -1

    def _need(self, n: int) -> None:
        """Have ``n`` (at most ``_READ_BYTES``) bytes buffered from ``_lo`` on."""
        if self._hi - self._lo >= n:
            return
        if self._lo + n > len(self._buf):
            live = self._buf[self._lo : self._hi]
            self._buf[: len(live)] = live
            self._lo, self._hi = 0, len(live)
        view = memoryview(self._buf)
        while self._hi - self._lo < n:
            self._hi += self._recv_into(view[self._hi :])

    def _large(self, n: int) -> mmap.mmap:
        """A body of ``n`` bytes (more than the read buffer), in a mapping that grows with
        what arrives: the declared length alone takes no memory."""
        size = min(n, _LARGE_FIRST)
        try:
            m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        except (OSError, OverflowError, ValueError) as e:
            raise ConnectionError(f"cannot receive a frame of {n} bytes: {e}") from None
        have = self._hi - self._lo
        m[:have] = self._buf[self._lo : self._hi]
        self._lo = self._hi = 0
        while have < n:
            if have == size:
                size = min(n, 2 * size)
                try:
                    m.resize(size)  # mremap: no copy, and no view may be alive
                except (OSError, OverflowError, ValueError) as e:
                    raise ConnectionError(f"cannot receive a frame of {n} bytes: {e}") from None
            have += self._recv_into(memoryview(m)[have:size])
        return m

    def _recv_into(self, view: memoryview) -> int:
        """Receive into ``view`` (and keep passed descriptors); the byte count, never 0."""
        if _SPIN is not None:
            # The next frame usually comes soon (a reply, a backward's gradients):
            # catching it awake saves a sleeping CPU's wake-up and cold caches.
            _SPIN(self._fd, _SPIN_NS)
        got, anc, flags, _ = self._sock.recvmsg_into([view], _ANC)
        first = self._got
        self._got += got
        if anc:
            self._keep_fds(anc, first)
        if flags & socket.MSG_CTRUNC:
            raise ConnectionError("passed descriptors were truncated")
        if not got:
            raise EOFError("stream closed")
        return got

    def _keep_fds(self, anc: list[tuple[int, int, bytes]], first: int) -> None:
        for level, typ, data in anc:
            if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
                for fd in array.array("i", data[: len(data) - len(data) % 4]):
                    self.fds.append((fd, first, self._got))
        if len(self.fds) > _MAX_PENDING_FDS:  # they are closed with the link
            log.warning(
                "rpc: %s passed %d descriptors that no frame claims; dropping the link",
                self._peer,
                len(self.fds),
            )
            raise ConnectionError(f"passed more than {_MAX_PENDING_FDS} unclaimed descriptors")

    def close_fds(self) -> None:
        while self.fds:
            os.close(self.fds.popleft()[0])


_reading = threading.local()


def on_reader_thread() -> bool:
    """True in a thread doing a frame's work for a link (the watchdog detaches it if slow)."""
    return getattr(_reading, "active", False)


class _Watchdog:
    """Hands a link's reading to a spare thread when one frame's work runs too long.

    One thread per process. It checks every ``RPC_INLINE_CHECK_S`` while frames
    are being handled and parks after ``RPC_INLINE_PARK_S`` without any; the
    next frame wakes it (one wake-up per busy spell, not per frame).
    """

    def __init__(self) -> None:
        self._links: set[LocalLink] = set()
        self._cv = threading.Condition()
        self._parked = False
        self._seen = False  # a frame started since the last check
        self._thread: threading.Thread | None = None

    def watch(self, link: LocalLink) -> None:
        with self._cv:
            self._links.add(link)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="tpj-rpc-local-watchdog", daemon=True
                )
                self._thread.start()

    def unwatch(self, link: LocalLink) -> None:
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
                log.exception("rpc: same-host watchdog error")
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


class LocalLink:
    """One connection end: ``send`` writes a message; callbacks report what arrives."""

    def __init__(self, sock: socket.socket, peer: str, max_threads: int = 17) -> None:
        self.peer = peer
        self.alive = True
        self.reason = ""
        self._sock = sock
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._backlog: collections.deque[list[Any]] = collections.deque()  # [data, fd or -1]
        self._writer: threading.Thread | None = None
        # Segments lent to the peer (id -> (fd, size)), and ids of the peer's segments
        # whose last array here is gone, waiting to be sent back as RELEASE.
        self._segment_ids = itertools.count(1)
        self._lent: dict[int, tuple[int, int]] = {}
        self._released: queue.SimpleQueue[int | None] = queue.SimpleQueue()
        self._releaser: threading.Thread | None = None
        # Reading: one thread at a time holds the "baton" (see detach_reader).
        self._rcv = threading.Condition()
        self._max_threads = max_threads
        self._threads = self._spare = 0
        self._baton_free = self._done = False
        self._baton: int | None = None
        self._reader: _Reader | None = None
        self._callbacks: tuple[OnMessage, OnMalformed, OnClosed] | None = None
        self._busy_since: float | None = None  # when the reader's current frame work began

    def send(self, env: bytes, header: bytes, buffers: Sequence[Any] = ()) -> None:
        """Send one message (thread-safe, never blocks for long); dropped once the link is dead."""
        if not self.alive:
            return
        fd = -1
        try:
            if sum(b.nbytes for b in buffers) <= _INLINE_BYTES:
                parts = pack_message(env, header, buffers)
                kind = _INLINE
            else:
                sid, fd = self._lend(buffers)
                parts = [_U64.pack(sid), *pack_message(env, header, buffers, with_buffers=False)]
                kind = _SHM
        except OSError as e:
            self._fail(f"could not stage a message: {e}")
            return
        body = b"".join(parts)
        self._write(_FRAME.pack(len(body), kind) + body, fd)

    def _lend(self, buffers: Sequence[Any]) -> tuple[int, int]:
        """Stage ``buffers`` in a segment lent to the peer until it sends RELEASE.

        Returns the segment id and a descriptor for the frame to carry (the link
        keeps its own until the peer releases the segment).
        """
        fd, size = _pool.take(_offsets([b.nbytes for b in buffers])[-1])
        try:
            _fill(fd, buffers)
            sid = next(self._segment_ids)
            with self._lock:
                if not self.alive:
                    raise OSError("link closed")
                self._lent[sid] = (fd, size)
        except BaseException:
            os.close(fd)
            raise
        return sid, os.dup(fd)

    def _write(self, data: bytes, fd: int) -> None:
        with self._lock:
            if not self.alive:
                if fd >= 0:
                    os.close(fd)
                return
            if not self._backlog:
                try:
                    sent = self._send_some(data, fd, _DONTWAIT)
                except BlockingIOError:
                    sent = 0
                except OSError as e:
                    self._fail_locked(f"send failed: {e}")
                    if fd >= 0:
                        os.close(fd)
                    return
                if sent:
                    if fd >= 0:
                        os.close(fd)
                        fd = -1
                    if sent == len(data):
                        return
                    data = memoryview(data)[sent:]
            self._backlog.append([data, fd])
            if self._writer is None:
                self._writer = threading.Thread(
                    target=self._drain, name=f"tpj-rpc-local-writer-{self.peer}", daemon=True
                )
                self._writer.start()
            self._wake.notify()

    def _send_some(self, data: Any, fd: int, flags: int) -> int:
        if fd >= 0:
            anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))]
            return self._sock.sendmsg([data], anc, flags | _NOSIGNAL)
        return self._sock.send(data, flags | _NOSIGNAL)

    def _drain(self) -> None:
        while True:
            with self._lock:
                while self.alive and not self._backlog:
                    self._wake.wait()
                if not self.alive:
                    return
                item = self._backlog[0]  # stays queued while we send, so others queue behind it
            try:
                data, fd = item
                sent = self._send_some(data, fd, 0)
                if fd >= 0:
                    os.close(fd)
                    item[1] = -1
                if sent < len(data):
                    self._sock.sendall(memoryview(data)[sent:], _NOSIGNAL)
            except OSError as e:
                self._fail(f"send failed: {e}")
                return
            with self._lock:
                self._backlog.popleft()

    def _take_back(self, ids: Iterable[tuple[int]]) -> None:
        with self._lock:
            segs = [seg for (i,) in ids if (seg := self._lent.pop(i, None)) is not None]
        for seg in segs:
            _pool.give(*seg)

    def _start_releaser(self) -> None:
        if self._releaser is None:
            self._releaser = threading.Thread(
                target=self._release_loop, name=f"tpj-rpc-local-release-{self.peer}", daemon=True
            )
            self._releaser.start()

    def _release_loop(self) -> None:
        # Finalizers only queue ids (they may run anywhere, even under our locks);
        # this thread tells the peer, in batches.
        q = self._released
        while True:
            ids = [q.get()]
            while not q.empty():
                ids.append(q.get())
            live = [i for i in ids if i is not None]
            if live:
                body = struct.pack(f"<{len(live)}Q", *live)
                self._write(_FRAME.pack(len(body), _RELEASE) + body, -1)
            if len(live) < len(ids) or not self.alive:
                return

    def _fail(self, reason: str) -> None:
        with self._lock:
            self._fail_locked(reason)

    def _fail_locked(self, reason: str) -> None:
        # The reader sees the shutdown, reports the link closed and fails its calls.
        if self.alive:
            self.alive = False
            self.reason = self.reason or reason
            for _, fd in self._backlog:
                if fd >= 0:
                    os.close(fd)
            self._backlog.clear()
            for fd, _ in self._lent.values():
                os.close(fd)
            self._lent.clear()
            self._released.put(None)
            self._wake.notify_all()
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._fail("closed")

    def read_forever(
        self, on_message: OnMessage, on_malformed: OnMalformed, on_closed: OnClosed
    ) -> None:
        """Read and dispatch frames until the connection ends; the caller is the first reader."""
        self._reader = _Reader(self._sock, self.peer)
        self._callbacks = (on_message, on_malformed, on_closed)
        self._threads = 1
        self._baton_free = True
        _watchdog.watch(self)
        self._run_reader()

    def serves_inline(self) -> bool:
        """Whether the reading thread may do a frame's work itself (it can be detached if slow).

        False when the link already has its most threads and none is spare: the
        agent then hands the work to its pool.
        """
        return not self._done and (self._spare > 0 or self._threads < self._max_threads)

    def _detach_busy(self, since: float) -> None:
        """From the watchdog: if the frame work that began at ``since`` still runs, hand
        reading to another thread (a spare, or a new one within ``max_threads``)."""
        with self._rcv:
            if self._busy_since != since or self._done:
                return
            if self._spare:
                self._rcv.notify()
            elif self._threads < self._max_threads:
                self._threads += 1
                threading.Thread(
                    target=self._run_reader, name=f"tpj-rpc-local-{self.peer}", daemon=True
                ).start()
            else:
                return
            self._busy_since = None
            self._baton_free = True
            self._baton = None

    def _run_reader(self) -> None:
        me = threading.get_ident()
        while True:
            with self._rcv:
                self._spare += 1
                while not self._baton_free and not self._done:
                    self._rcv.wait()
                self._spare -= 1
                if self._done:
                    self._threads -= 1
                    return
                self._baton_free = False
                self._baton = me
            if not self._read_while_holding(me):
                return

    def _segment_message(self, body: bytes | mmap.mmap, fd: int) -> Message:
        """The message of an ``SHM`` frame, its buffers mapped from segment ``fd`` (closed
        here, whatever happens)."""
        try:
            if len(body) < _U64.size:
                raise FramingError("a shared-memory frame too short for its segment id")
            (sid,) = _U64.unpack_from(body)
            msg = unpack_message(memoryview(body)[_U64.size :], with_buffers=False)
        except BaseException:
            os.close(fd)
            raise
        bufs = _map(fd, msg.buffers, functools.partial(self._released.put, sid))
        return Message(msg.envelope, msg.header, bufs)

    def _read_while_holding(self, me: int) -> bool:
        """Dispatch frames while this thread is the reader; False once the stream ended."""
        on_message, on_malformed, on_closed = self._callbacks
        reader = self._reader
        try:
            while True:
                kind, body, fd = reader.frame()
                try:
                    if kind == _INLINE:
                        msg = unpack_message(memoryview(body))
                    elif kind == _SHM:
                        if fd < 0:
                            raise ConnectionError("a shared-memory frame came without its segment")
                        msg = self._segment_message(body, fd)
                        self._start_releaser()
                    elif kind == _RELEASE:
                        if len(body) % _U64.size:
                            raise FramingError("a RELEASE frame's length is not a multiple of 8")
                        self._take_back(_U64.iter_unpack(body))
                        continue
                    else:
                        raise FramingError(f"unknown frame kind {kind}")
                except FramingError as e:
                    on_malformed(self, e)
                    continue
                self._busy_since = time.monotonic()
                _watchdog.poke()
                _reading.active = True
                try:
                    on_message(self, msg)
                finally:
                    _reading.active = False
                    # Hold no message between frames: its arrays may be the last on a segment.
                    msg = body = None  # type: ignore[assignment]
                    with self._rcv:
                        self._busy_since = None
                        detached = self._baton != me
                if detached:
                    return True  # the watchdog handed reading on: someone else reads now
        except (EOFError, ConnectionError, OSError) as e:
            reason = f"{type(e).__name__}: {e}" if not isinstance(e, EOFError) else str(e)
        except Exception as e:
            log.exception("rpc: local reader for %s failed", self.peer)
            reason = f"{type(e).__name__}: {e}"
        reader.close_fds()
        with self._rcv:
            self._done = True
            self._threads -= 1
            self._reader = None  # its read buffer goes now, even if something holds the link
            self._rcv.notify_all()
        _watchdog.unwatch(self)
        self._fail(reason)
        with contextlib.suppress(OSError):
            self._sock.close()
        on_closed(self, self.reason)
        return False


class LocalServer:
    """Accepts same-host connections; calls back for each message on an authenticated one."""

    def __init__(
        self,
        *,
        secret: str,
        on_message: OnMessage,
        on_malformed: OnMalformed,
        on_closed: OnClosed,
        max_threads: int = 17,
    ) -> None:
        self._secret = secret.encode()
        self._max_threads = max_threads
        self._on_message, self._on_malformed = on_message, on_malformed
        self._on_closed = on_closed
        self._links: set[LocalLink] = set()
        self._lock = threading.Lock()
        self._stopped = False
        self.address = f"tensorplay-jax-rpc/{os.getpid()}/{secrets.token_hex(8)}"
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind("\0" + self.address)
        self._sock.listen(128)
        threading.Thread(target=self._accept, name="tpj-rpc-local-accept", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(
                target=self._serve, args=(conn,), name="tpj-rpc-local-serve", daemon=True
            ).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(_HANDSHAKE_TIMEOUT_S)
            nonce = secrets.token_bytes(_NONCE)
            conn.sendall(_MAGIC + nonce)
            got = _recv_exact(conn, 32 + _NONCE + _U16.size)
            if not hmac.compare_digest(got[:32], _mac(self._secret, b"client", nonce)):
                # Reject before reading (let alone decoding) anything else the peer sent.
                log.warning("rpc: rejected a same-host connection without the job secret")
                conn.close()
                return
            (n,) = _U16.unpack_from(got, 32 + _NONCE)
            if n > _MAX_NAME:
                raise ConnectionError("peer name too long")
            peer = _recv_exact(conn, n).decode("utf-8", "replace")
            conn.sendall(_mac(self._secret, b"server", got[32 : 32 + _NONCE]))
            conn.settimeout(None)
        except (OSError, ConnectionError) as e:
            log.debug("rpc: same-host handshake failed: %s", e)
            conn.close()
            return
        link = LocalLink(conn, peer, self._max_threads)
        with self._lock:
            if self._stopped:
                conn.close()
                return
            self._links.add(link)

        def on_closed(link: Any, reason: str) -> None:
            with self._lock:
                self._links.discard(link)
            self._on_closed(link, reason)

        link.read_forever(self._on_message, self._on_malformed, on_closed)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            links = list(self._links)
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        for link in links:
            link.close()


def connect_local(
    address: str,
    *,
    peer: str,
    secret: str,
    me: str,
    on_message: OnMessage,
    on_malformed: OnMalformed,
    on_closed: OnClosed,
    max_threads: int = 17,
) -> LocalLink:
    """Connect to the same-host server at ``address``, authenticate, start reading replies.

    Raises:
      OSError: no such server here, or the handshake failed (use gRPC instead).
    """
    key = secret.encode()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(_HANDSHAKE_TIMEOUT_S)
        sock.connect("\0" + address)
        hello = _recv_exact(sock, len(_MAGIC) + _NONCE)
        if hello[: len(_MAGIC)] != _MAGIC:
            raise ConnectionError("not a tensorplay_jax same-host RPC server")
        mine = secrets.token_bytes(_NONCE)
        name = me.encode()
        sock.sendall(
            _mac(key, b"client", hello[len(_MAGIC) :]) + mine + _U16.pack(len(name)) + name
        )
        proof = _recv_exact(sock, 32)
        if not hmac.compare_digest(proof, _mac(key, b"server", mine)):
            raise ConnectionError("the same-host server does not hold the job secret")
        sock.settimeout(None)
    except BaseException:
        sock.close()
        raise
    link = LocalLink(sock, peer, max_threads)
    threading.Thread(
        target=link.read_forever,
        args=(on_message, on_malformed, on_closed),
        name=f"tpj-rpc-local-link-{peer}",
        daemon=True,
    ).start()
    return link
