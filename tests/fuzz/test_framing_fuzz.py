"""Fuzzing the stream decoders: gRPC packets, and same-host and TCP frames with and without
passed descriptors. Every input ends in a message, a skipped frame (``FramingError``), or the
end of the stream (``StreamError``, or the socket's end); none hangs or allocates what a peer
merely declares.

The socket frames go through a real socket pair into the transports' own readers
(``_FdReader`` for the same-host link, ``_TcpReader``) and their links' ``_message``.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct

from hypothesis import given
from hypothesis import strategies as st

from tensorplay_jax.rpc import _framing, _local, _tcp
from tensorplay_jax.rpc._framing import FramingError, Inbox, StreamError
from tensorplay_jax.rpc._local import frames as local_frames
from tests.fuzz import _peers as P
from tests.fuzz._fuzz import fuzz

_ENV, _HEADER = P.call_message(3)
_GOOD = b"".join(_framing.pack_message(_ENV, _HEADER, [memoryview(b"abcd")]))
_U64 = st.integers(0, 2**64 - 1)
_SMALLISH = st.one_of(st.integers(0, 70), _U64)


def _mutated(base: bytes) -> st.SearchStrategy[bytes]:
    """``base`` with a few bytes changed, cut short, or extended."""

    def apply(edits: list[tuple[int, int]], cut: int, tail: bytes) -> bytes:
        b = bytearray(base)
        for at, v in edits:
            if b:
                b[at % len(b)] = v
        return bytes(b[: max(cut, 0)] if cut < len(b) else b) + tail

    return st.builds(
        apply,
        st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4),
        st.integers(0, len(base) + 1),
        st.binary(max_size=8),
    )


messages = st.one_of(st.binary(max_size=96), _mutated(_GOOD))


def _prelude(sizes: list[int], env: bytes, header: bytes) -> bytes:
    return struct.pack("<III", len(env), len(header), len(sizes)) + b"".join(
        struct.pack("<Q", s) for s in sizes
    )


packets = st.one_of(
    st.binary(max_size=96),
    messages.map(lambda m: b"\x01" + struct.pack("<I", len(m)) + m),
    _mutated(b"\x01" + struct.pack("<I", len(_GOOD)) + _GOOD),
    st.builds(
        lambda tid, sizes: (
            struct.pack("<BQ", 2, tid) + _prelude(sizes, _ENV, _HEADER) + _ENV + _HEADER
        ),
        st.integers(0, 3),
        st.lists(_SMALLISH, max_size=3),
    ),
    st.builds(
        lambda tid, i, off, data: struct.pack("<BQIQ", 3, tid, i, off) + data,
        st.integers(0, 3),
        st.integers(0, 3),
        st.one_of(st.integers(0, 8), _U64),
        st.binary(max_size=64),
    ),
)


@fuzz(ci=400)
@given(st.lists(packets, max_size=8))
def test_grpc_packets(seq):
    inbox = Inbox()
    for packet in seq:
        try:
            for m in inbox.feed(packet):
                assert isinstance(m, _framing.Message)
        except FramingError:
            pass  # the packet is skipped; the inbox stays usable
    inbox.close()


@fuzz(ci=300)
@given(messages, st.booleans())
def test_unpack_message(data, with_buffers):
    with contextlib.suppress(FramingError):
        _framing.unpack_message(memoryview(data), with_buffers=with_buffers)


# ---------------------------------------------------------------------- socket frames

_KINDS = st.one_of(st.sampled_from([1, 2, 3]), st.integers(0, 255))


def _frame_bytes(kind: int, body: bytes, length: int | None) -> bytes:
    return struct.pack("<QB", len(body) if length is None else length, kind) + body


frames = st.builds(
    _frame_bytes,
    _KINDS,
    st.one_of(
        messages,
        messages.map(lambda m: struct.pack("<Q", 1) + m),  # an SHM body
        st.lists(st.integers(0, 2**64 - 1), max_size=3).map(
            lambda ids: b"".join(struct.pack("<Q", i) for i in ids)
        ),  # a RELEASE body
    ),
    st.one_of(st.none(), st.none(), _SMALLISH),
)


def _read_all(link_type: type, reader_type: type, data: bytes, fds: list[tuple[int, int]]) -> None:
    """Feed ``data`` (with descriptors passed at the given byte offsets) through a socket pair
    into a link's reader; read frames until the stream ends or the input is used up."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    link = link_type(a, "fuzzer")
    reader = link._new_reader()
    assert type(reader) is reader_type
    try:
        pos = 0
        for at, fd in sorted(fds):
            at = min(at, len(data))
            if at > pos:
                b.sendall(data[pos:at])
            piece = data[at : at + 1] or b"\0"
            b.sendmsg([piece], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", fd))])
            pos = at + len(piece)
        if pos < len(data):
            b.sendall(data[pos:])
        b.shutdown(socket.SHUT_WR)  # the input ends: the reader sees the stream close
        while True:
            try:
                kind, body, fd = reader.frame()
            except (EOFError, StreamError):
                break
            try:
                link._message(kind, body, fd)
            except StreamError:
                break
            except FramingError:
                continue
    finally:
        reader.close_fds()
        link._fail("fuzzed")
        a.close()
        b.close()


def _fds(n: int) -> list[int]:
    return [os.open("/dev/null", os.O_RDONLY) for _ in range(n)]


@fuzz(ci=200)
@given(st.lists(frames, max_size=5), st.lists(st.integers(0, 400), max_size=3))
def test_local_frames_with_descriptors(seq, offsets):
    data = b"".join(seq)
    before = len(os.listdir("/proc/self/fd"))
    passed = _fds(len(offsets))
    try:
        _read_all(
            _local.LocalLink, local_frames._FdReader, data, list(zip(offsets, passed, strict=False))
        )
    finally:
        for fd in passed:
            os.close(fd)
    # Every descriptor the reader took was closed (or handed to a frame and closed there).
    assert len(os.listdir("/proc/self/fd")) == before


@fuzz(ci=200)
@given(st.lists(frames, max_size=5))
def test_tcp_frames(seq):
    _read_all(_tcp.TcpLink, _tcp._TcpReader, b"".join(seq), [])
