"""One same-host connection end, ``LocalLink``: sending, lending segments, and reading in turn.

- Sends go straight to the socket from the sending thread (no hand-off); if
  the socket is full, the rest waits in a backlog that the link's writer
  thread drains in order, so a send never blocks. Buffers up to
  ``_INLINE_BYTES`` travel in an ``INLINE`` frame; larger ones in a shared
  memory segment lent to the peer until it sends ``RELEASE`` (see
  ``segments`` and ``frames``).
- A closed link closes the descriptors of every segment it lent, and drops
  everything it holds at once (nothing keeps a dead link's buffers alive).
- Reading: one thread at a time holds the link's "baton", reads a frame and
  does its work itself; the ``watchdog`` hands the baton to a spare thread
  when that work runs long (at most ``max_threads`` readers per link).
"""

from __future__ import annotations

import array
import collections
import contextlib
import functools
import itertools
import logging
import mmap
import os
import queue
import socket
import struct
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

from tensorplay_jax.rpc._framing import FramingError, Message, pack_message, unpack_message
from tensorplay_jax.rpc._link import Inbound
from tensorplay_jax.rpc._local.frames import _FRAME, _INLINE, _RELEASE, _SHM, _U64, _Reader
from tensorplay_jax.rpc._local.segments import _fill, _map, _offsets, _pool
from tensorplay_jax.rpc._local.watchdog import _reading, _watchdog

log = logging.getLogger(__name__)

# Buffers beyond this go through shared memory: a socket of ~200 KiB passes a
# larger inline frame in several wake-ups of both sides, which cost more than a segment.
_INLINE_BYTES = 64 << 10
_NOSIGNAL = getattr(socket, "MSG_NOSIGNAL", 0)
_DONTWAIT = getattr(socket, "MSG_DONTWAIT", 0)


class LocalLink:
    """One connection end (a ``_link.Link``): ``send`` writes; its ``Inbound`` gets what arrives."""

    _reader_type = _Reader  # what takes frames off the socket (the TCP link reads its own way)

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
        self._inbound: Inbound | None = None
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
                    data = self._rest(data, sent)
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

    def _rest(self, data: Any, sent: int) -> Any:
        """What is left of ``data`` to send after its first ``sent`` bytes."""
        return memoryview(data)[sent:]

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
                while sent < len(data):
                    data = self._rest(data, sent)
                    sent = self._send_some(data, -1, 0)
            except OSError as e:
                self._fail(f"send failed: {e}")
                return
            with self._lock:
                self._backlog.popleft()
            # Hold nothing sent while waiting for the next: its buffers may be a reused
            # receive mapping that the next message needs back (see _tcp).
            item = data = None

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

    def read_forever(self, inbound: Inbound) -> None:
        """Read and dispatch frames until the connection ends; the caller is the first reader."""
        self._reader = self._reader_type(self._sock, self.peer)
        self._inbound = inbound
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
        on_message, on_malformed, on_closed = self._inbound
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
