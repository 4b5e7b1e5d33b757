"""Packets on a long-lived stream: batches of small messages, and large messages in chunks.

A *message* is ``(envelope, header, buffers)``: a small control record, the
codec's msgpack header, and raw array buffers. One stream packet is one of

- ``SMALL``: ``b"\\x01"`` then, per message, ``u32 length`` + the serialised
  message (prelude with the three lengths and buffer sizes, then the bytes);
  messages queued together go out together, which is what makes pipelined
  calls cheap;
- ``BEGIN``: ``b"\\x02"``, ``u64 transfer id``, then a serialised message
  without its buffer bytes: the receiver allocates 64-byte aligned buffers;
- ``CHUNK``: ``b"\\x03"``, ``u64 transfer id``, ``u32 buffer index``,
  ``u64 offset``, then up to ``RPC_CHUNK_BYTES`` of that buffer.

The sender interleaves chunks of large messages with batches of small ones so
a large transfer does not hold up small calls, and makes chunks lazily, so a
large message costs about one chunk of extra memory on the sending side and
its final buffer (plus one chunk) on the receiving side. Nothing here knows
about msgpack or grpc.
"""

from __future__ import annotations

import collections
import itertools
import mmap
import queue
import struct
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np

from tensorplay_jax._constants import RPC_BATCH_BYTES, RPC_CHUNK_BYTES, RPC_SMALL_MESSAGE_BYTES

__all__ = ["FramingError", "Inbox", "Message", "Outbox", "pack_message", "unpack_message"]

_SMALL, _BEGIN, _CHUNK = 1, 2, 3
_U32 = struct.Struct("<I")
_PRELUDE = struct.Struct("<III")  # envelope length, header length, buffer count
_BEGIN_HDR = struct.Struct("<BQ")
_CHUNK_HDR = struct.Struct("<BQIQ")
_ALIGN = 64
_POPULATE_MIN = 1 << 20
_MAP_POPULATE = getattr(mmap, "MAP_POPULATE", 0)


class FramingError(ValueError):
    """A packet that does not parse (truncated, unknown kind, inconsistent sizes)."""


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
    one costs more than the copy into them (10x on the machines we measured).
    """
    if n >= _POPULATE_MIN and _MAP_POPULATE:
        m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_POPULATE)
        return np.frombuffer(m, dtype=np.uint8)
    raw = np.empty(n + _ALIGN, dtype=np.uint8)
    off = (-raw.ctypes.data) % _ALIGN
    return raw[off : off + n]


class _Partial:
    __slots__ = ("buffers", "env", "header", "remaining")


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
            p = _Partial()
            p.env, p.header = env, bytes(header)
            p.buffers = [_aligned(n) for n in sizes]
            p.remaining = sum(sizes)
            if p.remaining == 0:
                return [Message(p.env, p.header, p.buffers)]
            self._partial[tid] = p
            return []
        if kind == _CHUNK:
            _, tid, index, off = _CHUNK_HDR.unpack_from(mv, 0)
            p = self._partial.get(tid)
            if p is None:
                raise FramingError(f"chunk for unknown transfer {tid}")
            data = np.frombuffer(packet, dtype=np.uint8, offset=_CHUNK_HDR.size)
            dst = p.buffers[index]
            if off + data.size > dst.size:
                del self._partial[tid]
                raise FramingError(f"chunk past the end of buffer {index} of transfer {tid}")
            dst[off : off + data.size] = data
            p.remaining -= data.size
            if p.remaining == 0:
                del self._partial[tid]
                return [Message(p.env, p.header, p.buffers)]
            return []
        raise FramingError(f"unknown packet kind {kind}")
