"""One same-host connection end, ``LocalLink``: a socket link that lends shared memory.

The socket machinery (backlog, reading baton, watchdog) is ``rpc/_socket``'s
``SocketLink``. What this transport adds:

- Buffers up to ``_INLINE_BYTES`` travel in an ``INLINE`` frame; larger ones
  in a shared memory segment lent to the peer until it sends ``RELEASE``
  (see ``segments`` and ``frames``), its descriptor passed with the frame.
- A closed link closes the descriptors of every segment it lent.
"""

from __future__ import annotations

import array
import functools
import itertools
import os
import queue
import socket
import struct
import threading
from collections.abc import Iterable, Sequence
from typing import Any

from tensorplay_jax.rpc._framing import (
    FramingError,
    Message,
    StreamError,
    pack_message,
    unpack_message,
)
from tensorplay_jax.rpc._local.frames import _FRAME, _INLINE, _RELEASE, _SHM, _U64, _FdReader
from tensorplay_jax.rpc._local.segments import _fill_in_parallel, _mapped, _offsets, _pool, _Segment
from tensorplay_jax.rpc._socket.link import _NOSIGNAL, SocketLink

# Buffers beyond this go through shared memory: a socket of ~200 KiB passes a
# larger inline frame in several wake-ups of both sides, which cost more than a segment.
_INLINE_BYTES = 64 << 10
_owners = itertools.count(1)


class LocalLink(SocketLink):
    """One connection end (a ``_link.Link``): ``send`` writes; its ``Inbound`` gets what arrives."""

    _reader_type = _FdReader
    _kind = "local"

    def __init__(self, sock: socket.socket, peer: str, max_threads: int = 17) -> None:
        super().__init__(sock, peer, max_threads)
        # Segments lent to the peer (by id), and ids of the peer's segments whose
        # message's last array here is gone, waiting to be sent back as RELEASE.
        self._segment_ids = itertools.count(1)
        self._lent: dict[int, _Segment] = {}
        self._released: queue.SimpleQueue[int | None] = queue.SimpleQueue()
        self._releaser: threading.Thread | None = None
        self._owner = next(_owners)  # of the peer's segments mapped here (_mapped)

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
        seg = _pool.take(_offsets([b.nbytes for b in buffers])[-1])
        try:
            _fill_in_parallel(seg, buffers)
            sid = next(self._segment_ids)
            with self._lock:
                if not self.alive:
                    raise OSError("link closed")
                self._lent[sid] = seg
        except BaseException:
            seg.close()
            raise
        return sid, os.dup(seg.fd)

    def _send_some(self, data: Any, fd: int, flags: int) -> int:
        if fd >= 0:
            anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))]
            return self._sock.sendmsg([data], anc, flags | _NOSIGNAL)
        return self._sock.send(data, flags | _NOSIGNAL)

    def _take_back(self, ids: Iterable[tuple[int]]) -> None:
        """Take back the segments ``ids`` the peer released.

        On a closed link there is nothing to take back: closing closed every
        segment it lent (``_drop_locked``), and a RELEASE the peer sent before
        that may still be read after it.

        Raises:
          FramingError: some were never lent on this link (or were released already);
            the others are taken back.
        """
        unknown = []
        with self._lock:
            if not self.alive:
                return
            for (i,) in ids:
                seg = self._lent.pop(i, None)
                if seg is None:
                    unknown.append(i)
                else:
                    _pool.give(seg)  # in the pool by the time it is no longer lent
        if unknown:
            raise FramingError(
                f"a RELEASE of {len(unknown)} unknown segment(s) (not lent on this link, or "
                f"released already): {unknown[:4]}"
            )

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

    def _drop_locked(self) -> None:
        for seg in self._lent.values():
            seg.close()
        self._lent.clear()
        _mapped.clear(self._owner)
        self._released.put(None)

    def _segment_message(self, body: Any, fd: int) -> Message:
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
        bufs = _mapped.map(self._owner, fd, msg.buffers, functools.partial(self._released.put, sid))
        return Message(msg.envelope, msg.header, bufs)

    def _message(self, kind: int, body: Any, fd: int) -> Message | None:
        if kind == _SHM:
            if fd < 0:
                raise StreamError("a shared-memory frame came without its segment")
            msg = self._segment_message(body, fd)
            self._start_releaser()
            return msg
        if kind == _RELEASE:
            if len(body) % _U64.size:
                raise FramingError("a RELEASE frame's length is not a multiple of 8")
            self._take_back(_U64.iter_unpack(body))
            return None
        return super()._message(kind, body, fd)
