"""Frames of the same-host transport: the kinds it adds, and the reader of passed descriptors.

The frame layout and ``INLINE`` are the socket base's (``rpc/_socket/frames``);
this transport adds:

- ``SHM``: ``u64 segment id``, then the message without buffer bytes; the
  buffers travel in one ``memfd`` segment (see ``segments``) passed with the
  frame by ``SCM_RIGHTS``.
- ``RELEASE``: ``u64`` segment ids the receiver is done with.

Passed descriptors: the sender passes a segment's with the first byte of its
frame, and ``recvmsg`` returns no bytes past the first message that carried
descriptors, so a descriptor belongs to the last frame that starts among the
bytes its ``recvmsg`` returned. The reader gives it to that frame if it is an
``SHM`` frame and closes it otherwise (once a later frame starts past those
bytes); more than ``_MAX_PENDING_FDS`` unclaimed at once (an honest peer
leaves at most two) drops the link.
"""

from __future__ import annotations

import array
import collections
import logging
import os
import socket
import struct

from tensorplay_jax.rpc._framing import StreamError
from tensorplay_jax.rpc._socket.frames import _FRAME as _FRAME
from tensorplay_jax.rpc._socket.frames import _INLINE as _INLINE
from tensorplay_jax.rpc._socket.frames import _Reader
from tensorplay_jax.rpc._socket.spinner import _SPIN, _SPIN_NS

log = logging.getLogger(__name__)

_SHM, _RELEASE = 2, 3
_U64 = struct.Struct("<Q")
_MAX_FDS = 8
_CTRUNC = int(socket.MSG_CTRUNC)  # a plain int: an IntFlag's ``&`` costs microseconds a frame
_ANC = socket.CMSG_SPACE(_MAX_FDS * 4) if hasattr(socket, "CMSG_SPACE") else 0
# Passed descriptors no frame has claimed yet, at most (an honest peer leaves two: the
# frame being read's, and the next one's); more drops the link.
_MAX_PENDING_FDS = 2 * _MAX_FDS


class _FdReader(_Reader):
    """Frames and the descriptors passed with them, from one Unix socket."""

    def __init__(self, sock: socket.socket, peer: str = "") -> None:
        super().__init__(sock, peer)
        # Passed descriptors no frame has claimed yet: (fd, first, end), where [first, end)
        # are the stream offsets of the bytes received with it (see _claim).
        self.fds: collections.deque[tuple[int, int, int]] = collections.deque()
        self._warned = False

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

    def _recv_into(self, view: memoryview) -> int:
        """Receive into ``view`` (and keep passed descriptors); the byte count, never 0."""
        if _SPIN is not None:  # see _Reader._recv_into
            _SPIN(self._fd, _SPIN_NS)
        got, anc, flags, _ = self._sock.recvmsg_into([view], _ANC)
        first = self._got
        self._got += got
        if anc:
            self._keep_fds(anc, first)
        if flags & _CTRUNC:
            raise StreamError("passed descriptors were truncated")
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
            raise StreamError(f"passed more than {_MAX_PENDING_FDS} unclaimed descriptors")

    def close_fds(self) -> None:
        """Close the passed descriptors no frame claimed."""
        while self.fds:
            os.close(self.fds.popleft()[0])
