"""One socket connection end, ``SocketLink``: the send backlog and reading in turn.

- Sends go straight to the socket from the sending thread (no hand-off); if
  the socket is full, the rest waits in a backlog that the link's writer
  thread drains in order, so a send never blocks.
- Reading: one thread at a time holds the link's "baton", reads a frame and
  does its work itself; the ``watchdog`` hands the baton to a spare thread
  when that work runs long (at most ``max_threads`` readers per link).
- A closed link drops everything it holds at once (nothing keeps a dead
  link's buffers alive).
- A malformed frame is answered (the owner's ``on_malformed``) and skipped;
  one after which the stream cannot be read on (``StreamError``: a length
  past the host's memory, a shared-memory frame without its segment) is
  answered, and then the link hangs up: the peer never waits out a timeout.

A transport builds on it: its ``send`` packs frames (``frames``) and hands
them to ``_write``; its reader type takes them off the socket; the read loop
turns an ``INLINE`` frame into a message itself, and ``_message`` handles the
transport's own frame kinds (such as the same-host transport's shared-memory
messages and segment releases).

The busy mark the watchdog reads belongs to the frame of the thread that holds
reading: a relieved thread that finishes its frame leaves it alone, so a frame
read after it that blocks is still relieved.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import socket
import threading
import time
from typing import Any

from tensorplay_jax.rpc._framing import FramingError, Message, StreamError, unpack_message
from tensorplay_jax.rpc._link import Inbound
from tensorplay_jax.rpc._socket.frames import _INLINE, _Reader
from tensorplay_jax.rpc._socket.watchdog import _reading, _watchdog

log = logging.getLogger(__name__)

_NOSIGNAL = getattr(socket, "MSG_NOSIGNAL", 0)
_DONTWAIT = getattr(socket, "MSG_DONTWAIT", 0)
# How long a link that hangs up on a protocol error first waits for its answer to go out.
_ANSWER_FLUSH_S = 1.0


class SocketLink:
    """One connection end (a ``_link.Link``): ``_write`` sends; ``Inbound`` gets what arrives."""

    _reader_type: type[_Reader] = _Reader  # what takes frames off the socket
    _kind = "socket"  # the transport, in its threads' names

    def __init__(self, sock: socket.socket, peer: str, max_threads: int = 17) -> None:
        self.peer = peer
        self.alive = True
        self.reason = ""
        self._sock = sock
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._backlog: collections.deque[list[Any]] = collections.deque()  # [data, fd or -1]
        self._writer: threading.Thread | None = None
        # Reading: one thread at a time holds the "baton" (see _detach_busy).
        self._rcv = threading.Condition()
        self._max_threads = max_threads
        self._threads = self._spare = 0
        self._baton_free = self._done = False
        self._baton: int | None = None
        self._reader: _Reader | None = None
        self._inbound: Inbound | None = None
        self._busy_since: float | None = None  # when the reader's current frame work began

    # ------------------------------------------------------------------ sending

    def _write(self, data: Any, fd: int) -> None:
        """Send ``data`` (with the descriptor ``fd``, -1: none; closed here once sent), or
        queue what the socket cannot take now behind what is queued already."""
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
                    target=self._drain, name=f"tpj-rpc-{self._kind}-writer-{self.peer}", daemon=True
                )
                self._writer.start()
            self._wake.notify()

    def _send_some(self, data: Any, fd: int, flags: int) -> int:
        """Send what the socket takes of ``data`` now (a transport that passes descriptors
        sends ``fd`` with it); the byte count."""
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

    def _flush(self, timeout: float) -> None:
        """Wait (at most ``timeout`` seconds) until what was sent left the backlog."""
        end = time.monotonic() + timeout
        while self._backlog and self.alive and time.monotonic() < end:
            time.sleep(0.005)

    # ------------------------------------------------------------------ ending

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
            self._drop_locked()
            self._wake.notify_all()
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)

    def _drop_locked(self) -> None:
        """Let go of what the transport holds for the peer (the link just died; lock held)."""

    def close(self, reason: str = "closed") -> None:
        self._fail(reason or "closed")

    # ------------------------------------------------------------------ reading

    def read_forever(self, inbound: Inbound) -> None:
        """Read and dispatch frames until the connection ends; the caller is the first reader."""
        self._reader = self._new_reader()
        self._inbound = inbound
        self._threads = 1
        self._baton_free = True
        _watchdog.watch(self)
        self._run_reader()

    def _new_reader(self) -> _Reader:
        """The reader of this link's socket (a ``_reader_type``)."""
        return self._reader_type(self._sock, self.peer)

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
                    target=self._run_reader, name=f"tpj-rpc-{self._kind}-{self.peer}", daemon=True
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

    def _message(self, kind: int, body: Any, fd: int) -> Message | None:
        """The message a frame of a transport's own kind carries (``INLINE`` frames are read
        in ``_read_while_holding``), or None for a frame the transport handled itself.

        Raises:
          FramingError: a frame that is not a message (the link stays usable).
          StreamError: a frame after which the stream cannot be read on.
        """
        raise FramingError(f"unknown frame kind {kind}")

    def _read_while_holding(self, me: int) -> bool:
        """Dispatch frames while this thread is the reader; False once the stream ended."""
        on_message, on_malformed, on_closed = self._inbound  # type: ignore[misc]
        reader = self._reader
        assert reader is not None
        try:
            while True:
                try:
                    kind, body, fd = reader.frame()
                    if kind == _INLINE:  # the common frame, read here without a call
                        msg = unpack_message(memoryview(body))
                    else:
                        msg = self._message(kind, body, fd)
                except StreamError as e:
                    # Nothing after this frame can be read: answer, then hang up (a link
                    # this side closed meanwhile, as a stopping server does, reports nothing).
                    if not self._done:
                        on_malformed(self, e)
                    self._flush(_ANSWER_FLUSH_S)
                    raise ConnectionError(f"protocol error: {e}") from None
                except FramingError as e:
                    on_malformed(self, e)  # the frame is skipped; the next one reads
                    continue
                if msg is None:
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
                        detached = self._baton != me
                        if not detached:  # else the mark is the new reader's frame's
                            self._busy_since = None
                if detached:
                    return True  # the watchdog handed reading on: someone else reads now
        except (EOFError, ConnectionError, OSError) as e:
            reason = f"{type(e).__name__}: {e}" if not isinstance(e, EOFError) else str(e)
        except Exception as e:
            log.exception("rpc: socket reader for %s failed", self.peer)
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
