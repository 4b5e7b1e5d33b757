"""Packets on a long-lived stream: batches of small messages, and large messages in chunks.

A *message* is ``(envelope, header, buffers)``: a small control record, the
codec's msgpack header, and raw array buffers. One stream packet is one of

- ``SMALL``: ``b"\\x01"`` then, per message, ``u32 length`` + the serialised
  message (prelude with the three lengths and buffer sizes, then the bytes);
  messages queued together go out together, which is what makes pipelined
  calls cheap;
- ``BEGIN``: ``b"\\x02"``, ``u64 transfer id``, then a serialised message
  without its buffer bytes (their sizes are in its prelude);
- ``CHUNK``: ``b"\\x03"``, ``u64 transfer id``, ``u32 buffer index``,
  ``u64 offset``, then up to ``RPC_CHUNK_BYTES`` of that buffer. A transfer's
  chunks come in order: buffer by buffer, each from offset 0 on.

The sender interleaves chunks of large messages with batches of small ones so
a large transfer does not hold up small calls, and makes chunks lazily, so a
large message costs about one chunk of extra memory on the sending side and
its final buffer (plus one chunk) on the receiving side.

The receiver's memory follows the bytes that arrive, never the sizes a peer
declares: a buffer is allocated when its first chunk comes (64-byte aligned;
exactly its size when that chunk holds all of it), or, for a peer that sends
smaller pieces, once ``_STAGE_BYTES`` of it came; a large buffer is a mapping
whose pages are taken chunk by chunk. Nothing here knows about msgpack or grpc.
"""

from __future__ import annotations

import collections
import errno
import itertools
import mmap
import queue
import struct
import sys
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np

from tensorplay_jax.runtime.device import aligned_empty
from tensorplay_jax.runtime.settings import (
    RPC_BATCH_BYTES,
    RPC_CHUNK_BYTES,
    RPC_SMALL_MESSAGE_BYTES,
)

__all__ = [
    "FramingError",
    "Inbox",
    "Message",
    "Outbox",
    "StreamError",
    "pack_message",
    "unpack_message",
]

_SMALL, _BEGIN, _CHUNK = 1, 2, 3
_U32 = struct.Struct("<I")
_PRELUDE = struct.Struct("<III")  # envelope length, header length, buffer count
_BEGIN_HDR = struct.Struct("<BQ")
_CHUNK_HDR = struct.Struct("<BQIQ")
_POPULATE_MIN = 1 << 20
_MAP_POPULATE = getattr(mmap, "MAP_POPULATE", 0)
# A buffer whose first chunk does not hold all of it is allocated once this much of it
# came (until then its bytes wait in a small staging buffer): the sender's chunks
# (RPC_CHUNK_BYTES) are larger, so this only slows a peer that sends tiny pieces.
_STAGE_BYTES = 64 << 10
# Linux >= 5.14 (the value is Linux's; Python 3.11's mmap module does not name it):
# takes a range's pages at once, as MAP_POPULATE does for a whole mapping.
_MADV_POPULATE_WRITE = getattr(
    mmap, "MADV_POPULATE_WRITE", 23 if sys.platform.startswith("linux") else None
)


class FramingError(ValueError):
    """A packet that does not parse (truncated, unknown kind, inconsistent sizes)."""


class StreamError(FramingError):
    """A frame after which the stream cannot be read on (its framing is lost, or what came
    with it is): the receiver answers with the error, then closes the connection."""


class Message(NamedTuple):
    envelope: bytes | memoryview
    header: bytes | memoryview
    buffers: list[Any]


def _prelude(env: bytes, header: bytes, sizes: Sequence[int]) -> bytes:
    return _PRELUDE.pack(len(env), len(header), len(sizes)) + struct.pack(f"<{len(sizes)}Q", *sizes)


def pack_message(
    env: bytes, header: bytes, buffers: Sequence[memoryview], *, with_buffers: bool = True
) -> list[Any]:
    """The parts of one serialised message (prelude, envelope, header, then the buffers
    unless ``with_buffers`` is false: their sizes are in the prelude either way)."""
    parts: list[Any] = [_prelude(env, header, [b.nbytes for b in buffers]), env, header]
    if with_buffers:
        parts.extend(buffers)
    return parts


def unpack_message(mv: memoryview, *, with_buffers: bool = True) -> Message:
    """Parse what :func:`pack_message` made (all of ``mv``); without buffers, ``buffers``
    holds their sizes.

    Raises:
      FramingError: truncated or inconsistent.
    """
    try:
        env, header, buffers, stop = _parse(mv, 0, with_buffers)
    except FramingError:
        raise
    except (struct.error, IndexError, ValueError, TypeError) as e:
        raise FramingError(f"malformed message ({type(e).__name__}: {e})") from None
    if stop != mv.nbytes:
        raise FramingError("message length does not match its contents")
    return Message(env, header, buffers)


def _serialise_small(env: bytes, header: bytes, buffers: Sequence[memoryview]) -> bytes:
    sizes = [b.nbytes for b in buffers]
    body = [_prelude(env, header, sizes), env, header, *buffers]
    total = sum(len(p) if isinstance(p, bytes) else p.nbytes for p in body)
    return b"".join([_U32.pack(total), *body])


class _Large:
    __slots__ = ("buffers", "env", "header")

    def __init__(self, env: bytes, header: bytes, buffers: Sequence[memoryview]) -> None:
        self.env, self.header, self.buffers = env, header, buffers

    def packets(self, tid: int, chunk: int) -> Iterator[bytes]:
        sizes = [b.nbytes for b in self.buffers]
        yield b"".join(
            [
                _BEGIN_HDR.pack(_BEGIN, tid),
                _prelude(self.env, self.header, sizes),
                self.env,
                self.header,
            ]
        )
        for i, buf in enumerate(self.buffers):
            flat = buf.cast("B") if buf.format != "B" or buf.ndim != 1 else buf
            for off in range(0, flat.nbytes, chunk):
                yield b"".join([_CHUNK_HDR.pack(_CHUNK, tid, i, off), flat[off : off + chunk]])


_CLOSE = object()


class Outbox:
    """Messages waiting to go out on one stream; ``packets()`` feeds the stream."""

    def __init__(
        self,
        *,
        small_limit: int = RPC_SMALL_MESSAGE_BYTES,
        chunk_bytes: int = RPC_CHUNK_BYTES,
        batch_bytes: int = RPC_BATCH_BYTES,
    ) -> None:
        self._q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._small_limit = small_limit
        self._chunk = chunk_bytes
        self._batch = batch_bytes
        self._tids = itertools.count(1)
        self.closed = False

    def put(self, env: bytes, header: bytes, buffers: Sequence[memoryview] = ()) -> None:
        """Queue one message (thread-safe; never blocks). Dropped if the outbox is closed."""
        if self.closed:
            return
        if sum(b.nbytes for b in buffers) <= self._small_limit:
            self._q.put(_serialise_small(env, header, buffers))
        else:
            self._q.put(_Large(env, header, buffers))

    def close(self) -> None:
        """Stop ``packets()`` after what it is sending now; later ``put`` calls are dropped."""
        if not self.closed:
            self.closed = True
            self._q.put(_CLOSE)

    def packets(self) -> Iterator[bytes]:
        """Yield packets until closed: batches of small messages first, else the next chunk."""
        q = self._q
        large: collections.deque[Iterator[bytes]] = collections.deque()
        while True:
            if large:
                try:
                    item = q.get_nowait()
                except queue.Empty:
                    item = None
            else:
                item = q.get()
            small: list[bytes] = []
            size = 0
            while item is not None:
                if item is _CLOSE:
                    if small:
                        yield b"".join([b"\x01", *small])
                    return
                if isinstance(item, _Large):
                    large.append(item.packets(next(self._tids), self._chunk))
                else:
                    small.append(item)
                    size += len(item)
                    if size >= self._batch:
                        break
                try:
                    item = q.get_nowait()
                except queue.Empty:
                    item = None
            if small:
                yield b"".join([b"\x01", *small]) if len(small) > 1 else b"\x01" + small[0]
            elif large:
                try:
                    yield next(large[0])
                    large.rotate(-1)
                except StopIteration:
                    large.popleft()


def _aligned(n: int) -> np.ndarray:
    """A writable, 64-byte aligned buffer of n bytes.

    Large buffers are mapped with MAP_POPULATE: faulting in fresh pages one by
    one costs more than the copy into them.
    """
    if n >= _POPULATE_MIN and _MAP_POPULATE:
        m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_POPULATE)
        return np.frombuffer(m, dtype=np.uint8)
    return aligned_empty((n,), np.uint8)


def _lazy(n: int) -> tuple[np.ndarray, mmap.mmap]:
    """A writable, page-aligned buffer of n bytes that takes no memory until written.

    Raises:
      FramingError: no mapping of n bytes can be made here.
    """
    try:
        m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    except (OSError, OverflowError) as e:
        raise FramingError(f"cannot receive a buffer of {n} bytes: {e}") from None
    return np.frombuffer(m, dtype=np.uint8), m


def _populate(m: mmap.mmap, start: int, stop: int) -> None:
    """Take the pages of ``m[start:stop]`` in one call (cheaper than a fault per page)."""
    global _MADV_POPULATE_WRITE
    if _MADV_POPULATE_WRITE is None:
        return
    start -= start % mmap.PAGESIZE
    try:
        m.madvise(_MADV_POPULATE_WRITE, start, stop - start)
    except OSError as e:  # only advice: the copy faults in what is not there
        if e.errno == errno.EINVAL:  # a kernel before 5.14
            _MADV_POPULATE_WRITE = None


class _Partial:
    """A message whose buffers are arriving: buffer ``index`` has ``offset`` bytes so far.

    Its bytes go into ``dst`` (a mapping ``map`` when it came before all of the
    buffer did) or, while fewer than ``_STAGE_BYTES`` came, wait in ``staged``.
    """

    __slots__ = ("buffers", "dst", "env", "header", "index", "map", "offset", "sizes", "staged")

    def __init__(self, env: bytes, header: bytes, sizes: list[int]) -> None:
        self.env, self.header, self.sizes = env, header, sizes
        self.buffers: list[np.ndarray] = []
        self.index = self.offset = 0
        self.dst: np.ndarray | None = None
        self.map: mmap.mmap | None = None
        self.staged = bytearray()

    def skip_empty(self) -> bool:
        """Move past buffers of no bytes (no chunk comes for them); True once all are here."""
        while self.index < len(self.sizes) and self.sizes[self.index] == 0:
            self.buffers.append(_aligned(0))
            self.index += 1
        return self.index == len(self.sizes)

    def add(self, data: memoryview) -> bool:
        """Take the next chunk of buffer ``index``; True once the whole message is here."""
        n, start = self.sizes[self.index], self.offset
        stop = start + data.nbytes
        if self.dst is None:
            if stop < n and stop < _STAGE_BYTES:
                self.staged += data
                self.offset = stop
                return False
            if stop == n:
                self.dst = _aligned(n)  # all of it is here
            else:
                self.dst, self.map = _lazy(n)
            if self.staged:
                if self.map is not None:
                    _populate(self.map, 0, start)
                self.dst[:start] = np.frombuffer(self.staged, dtype=np.uint8)
                self.staged = bytearray()
        if self.map is not None:
            _populate(self.map, start, stop)
        self.dst[start:stop] = np.frombuffer(data, dtype=np.uint8)
        self.offset = stop
        if stop < n:
            return False
        self.buffers.append(self.dst)
        self.dst = self.map = None
        self.index += 1
        self.offset = 0
        return self.skip_empty()


def _parse(
    mv: memoryview, pos: int, with_buffers: bool
) -> tuple[bytes, memoryview, list[Any], int]:
    env_len, hdr_len, nbufs = _PRELUDE.unpack_from(mv, pos)
    pos += _PRELUDE.size
    sizes = struct.unpack_from(f"<{nbufs}Q", mv, pos)
    pos += 8 * nbufs
    env = bytes(mv[pos : pos + env_len])
    pos += env_len
    header = mv[pos : pos + hdr_len]
    pos += hdr_len
    if len(env) != env_len or header.nbytes != hdr_len:
        raise FramingError("truncated message")
    buffers: list[Any] = list(sizes)
    if with_buffers:
        for i, n in enumerate(sizes):
            buffers[i] = mv[pos : pos + n]
            if buffers[i].nbytes != n:
                raise FramingError("truncated message buffer")
            pos += n
    return env, header, buffers, pos


class Inbox:
    """Reassembles messages from the packets of one stream (one reader thread per Inbox)."""

    def __init__(self) -> None:
        self._partial: dict[int, _Partial] = {}

    def close(self) -> None:
        """Drop the messages still arriving (and the memory they hold)."""
        self._partial.clear()

    def feed(self, packet: bytes) -> list[Message]:
        """Parse one packet; return the messages it completes.

        Raises:
          FramingError: the packet is malformed; the Inbox stays usable.
        """
        try:
            return self._feed(packet)
        except FramingError:
            raise
        except (struct.error, IndexError, ValueError, TypeError) as e:
            raise FramingError(f"malformed packet ({type(e).__name__}: {e})") from None

    def _feed(self, packet: bytes) -> list[Message]:
        if not packet:
            raise FramingError("empty packet")
        mv = memoryview(packet)
        kind = packet[0]
        if kind == _SMALL:
            out, pos, end = [], 1, len(packet)
            while pos < end:
                (n,) = _U32.unpack_from(mv, pos)
                pos += 4
                if pos + n > end:
                    raise FramingError("truncated message in batch")
                env, header, buffers, stop = _parse(mv[: pos + n], pos, True)
                if stop != pos + n:
                    raise FramingError("message length does not match its contents")
                out.append(Message(env, header, buffers))
                pos += n
            return out
        if kind == _BEGIN:
            _, tid = _BEGIN_HDR.unpack_from(mv, 0)
            env, header, sizes, _ = _parse(mv, _BEGIN_HDR.size, False)
            # Nothing is allocated for the buffers yet: only what arrives takes memory.
            p = _Partial(env, bytes(header), sizes)
            if p.skip_empty():
                return [Message(p.env, p.header, p.buffers)]
            self._partial[tid] = p
            return []
        if kind == _CHUNK:
            _, tid, index, off = _CHUNK_HDR.unpack_from(mv, 0)
            p = self._partial.get(tid)
            if p is None:
                raise FramingError(f"chunk for unknown transfer {tid}")
            data = mv[_CHUNK_HDR.size :]
            if index != p.index or off != p.offset or not data.nbytes:
                del self._partial[tid]
                raise FramingError(
                    f"chunk out of order: buffer {index} at offset {off} of transfer {tid} "
                    f"(expected buffer {p.index} at offset {p.offset})"
                )
            if off + data.nbytes > p.sizes[index]:
                del self._partial[tid]
                raise FramingError(f"chunk past the end of buffer {index} of transfer {tid}")
            try:
                if not p.add(data):
                    return []
            except FramingError:
                del self._partial[tid]
                raise
            del self._partial[tid]
            return [Message(p.env, p.header, p.buffers)]
        raise FramingError(f"unknown packet kind {kind}")
