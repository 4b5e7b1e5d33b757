"""Frames on a stream socket: their layout, and the reader that takes them off the socket.

A frame is ``u64 body length``, ``u8 kind``, body. ``INLINE`` (kind 1) is the
one kind every socket transport reads: a ``_framing.pack_message`` message
with its buffers. A transport adds kinds of its own (the same-host one: a
message whose buffers sit in shared memory, and a segment release; see
``rpc/_local/frames``).

A body longer than the read buffer goes into its own mapping, which grows
(doubling) with the bytes that arrive: a declared length takes no memory by
itself; a length past this host's memory (no such frame could be received)
ends the stream with a ``StreamError``. Before a reader sleeps it may
yield-spin for the next frame (see ``spinner``).
"""

from __future__ import annotations

import mmap
import os
import socket
import struct

from tensorplay_jax.rpc._framing import StreamError
from tensorplay_jax.rpc._socket.spinner import _SPIN, _SPIN_NS

_INLINE = 1
_FRAME = struct.Struct("<QB")
_READ_BYTES = 256 << 10  # the read buffer; a longer frame body is received on its own
_LARGE_FIRST = 1 << 20  # a longer body's first mapping; it doubles as bytes arrive


def _host_memory() -> int:
    """This host's physical memory in bytes (2**48 where the system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 1 << 48


# The longest frame body a reader takes: a longer one could never be received here, so
# its length can only be a broken or hostile peer's (the stream's framing is lost).
_MAX_BODY = _host_memory()


class _Reader:
    """Frames from one socket (a transport's reader may also take what comes with them).

    ``fds`` and ``_claim`` are the hooks of a reader that takes descriptors passed with
    the frames (``rpc/_local/frames``): a plain socket passes none.
    """

    fds: object = ()  # descriptors passed with frames and not yet claimed: none here

    def __init__(self, sock: socket.socket, peer: str = "") -> None:
        self._sock = sock
        self._fd = sock.fileno()
        self._peer = peer
        self._buf = bytearray(_READ_BYTES)
        self._lo = self._hi = 0
        self._got = 0  # bytes received so far: the stream offset of the byte after _buf[_hi - 1]

    def frame(self) -> tuple[int, bytes | mmap.mmap, int]:
        """The next frame: its kind, its body, and the descriptor passed with it (-1: none;
        see ``_claim``).

        Raises:
          StreamError: a body length past this host's memory.
        """
        start = self._got - (self._hi - self._lo)  # the frame's stream offset
        self._need(_FRAME.size)
        length, kind = _FRAME.unpack_from(self._buf, self._lo)
        self._lo += _FRAME.size
        if length > _MAX_BODY:
            raise StreamError(
                f"a frame (kind {kind}) declares a body of {length} bytes, more than this "
                f"host's memory ({_MAX_BODY} bytes): the stream's framing is lost"
            )
        if length > _READ_BYTES:
            body: bytes | mmap.mmap = self._large(length, kind)
        else:
            self._need(length)
            body = bytes(memoryview(self._buf)[self._lo : self._lo + length])
            self._lo += length
        return kind, body, self._claim(start, kind) if self.fds else -1

    def _claim(self, start: int, kind: int) -> int:
        """The descriptor passed with the frame of ``kind`` at stream offset ``start``
        (-1: none; a plain socket passes none)."""
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

    def _large(self, n: int, kind: int) -> mmap.mmap:
        """A body of ``n`` bytes (more than the read buffer) of a frame of ``kind``, in a
        mapping that grows with what arrives: the declared length alone takes no memory."""
        size = min(n, _LARGE_FIRST)
        try:
            m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        except (OSError, OverflowError, ValueError) as e:
            raise StreamError(f"cannot receive a frame of {n} bytes: {e}") from None
        have = self._hi - self._lo
        m[:have] = self._buf[self._lo : self._hi]
        self._lo = self._hi = 0
        while have < n:
            if have == size:
                size = min(n, 2 * size)
                try:
                    m.resize(size)  # mremap: no copy, and no view may be alive
                except (OSError, OverflowError, ValueError) as e:
                    raise StreamError(f"cannot receive a frame of {n} bytes: {e}") from None
            have += self._recv_into(memoryview(m)[have:size])
        return m

    def _recv_into(self, view: memoryview) -> int:
        """Receive into ``view``; the byte count, never 0.

        It yield-spins briefly for the next bytes before sleeping in the receive (see
        ``spinner``): a reply or a backward's gradients usually come soon, and catching
        them awake saves a sleeping CPU's wake-up and cold caches.
        """
        if _SPIN is not None:
            _SPIN(self._fd, _SPIN_NS)
        got = self._sock.recv_into(view)
        if not got:
            raise EOFError("stream closed")
        self._got += got
        return got

    def close_fds(self) -> None:
        """Close what the reader holds besides the socket (nothing here)."""
