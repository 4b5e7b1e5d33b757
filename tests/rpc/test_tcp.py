"""The TCP link between hosts (``_tcp``): authentication first, long bodies, dead peers.

The multi-process tests run workers on loopback with the same-host transport
off, so pairs talk as workers on different hosts do.
"""

from __future__ import annotations

import contextlib
import gc
import queue
import socket

import numpy as np
import pytest

from tensorplay_jax.rpc import _codec, _tcp
from tensorplay_jax.rpc._local import frames
from tensorplay_jax.runtime import handshake
from tests.rpc import _tcp_workers as W
from tests.rpc import _transports as T


class _Sink:
    def __init__(self) -> None:
        self.messages: queue.Queue = queue.Queue()
        self.closed: queue.Queue = queue.Queue()
        self.malformed: list = []

    def kw(self) -> dict:
        return dict(
            on_message=lambda link, m: self.messages.put((link, m)),
            on_malformed=lambda link, e: self.malformed.append(e),
            on_closed=lambda link, reason: self.closed.put(reason),
        )


@pytest.fixture
def server():
    sink = _Sink()
    srv = _tcp.TcpServer(secret="s3cret", host="127.0.0.1", **sink.kw())
    yield srv, sink
    srv.stop()


def test_wrong_secret_is_rejected_before_anything_is_read(server):
    srv, sink = server
    with pytest.raises(OSError):  # the server closes the connection: no proof back
        _tcp.connect_tcp("127.0.0.1", srv.port, peer="p", secret="wrong", me="me", **_Sink().kw())
    # a raw client that skips the handshake and sends a frame: its bytes are never parsed
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as raw:
        assert raw.recv(8) == b"TPJTCP01"
        raw.sendall(b"\x00" * 66 + frames._FRAME.pack(4, frames._INLINE) + b"junk")
        with contextlib.suppress(ConnectionResetError):  # reset: closed with our bytes unread
            while raw.recv(4096):
                pass
    # a client of another protocol (the same-host magic) fails too
    with (
        socket.create_connection(("127.0.0.1", srv.port), timeout=10) as raw,
        pytest.raises(ConnectionError, match="not a TPJLOC01 server"),
    ):
        handshake.authenticate(raw, b"s3cret", "me", b"TPJLOC01")
    assert sink.messages.empty() and not sink.malformed


def test_long_messages_arrive_whole_and_their_mappings_are_reused(server):
    srv, sink = server
    link = _tcp.connect_tcp(
        "127.0.0.1", srv.port, peer="srv", secret="s3cret", me="c", **_Sink().kw()
    )
    x = np.arange((3 << 20) + 5, dtype=np.float32)
    for i in range(3):
        enc = _codec.encode([x + i, b"small", np.int8(i)])
        link.send(b"env", enc.header, enc.buffers)
        _, m = sink.messages.get(timeout=30)
        assert bytes(m.envelope) == b"env"
        got = _codec.decode(bytes(m.header), m.buffers)
        assert np.array_equal(got[0], x + i) and got[1:] == [b"small", i]
        assert got[0].flags.writeable and got[0].ctypes.data % 64 == 0  # aligned, no copy
        free = len(_tcp._free)
        del m, got
        gc.collect()
        assert len(_tcp._free) == min(free + 1, _tcp._POOL)  # its mapping waits for the next one
    link.close()
    assert sink.closed.get(timeout=10)  # the server saw the link end


def test_a_peer_that_goes_mid_body_closes_the_link_and_delivers_nothing(server):
    srv, sink = server
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    handshake.authenticate(sock, b"s3cret", "faulty", _tcp._MAGIC)
    sock.sendall(frames._FRAME.pack(64 << 20, frames._INLINE) + b"\1" * (5 << 20))
    sock.close()
    assert "closed" in sink.closed.get(timeout=10)
    assert sink.messages.empty() and not sink.malformed


def test_large_arrays_of_several_dtypes_round_trip_exactly(workers):
    res = workers(W.dtypes, 2, timeout=180, env=T.env_of("tcp"))
    assert "TCP-DTYPES-OK" in res[0].stdout, res[0]
    assert all(f"DONE {r.rank}" in r.stdout for r in res)


def test_a_peer_killed_mid_transfer_fails_the_call_cleanly(workers):
    res = workers(
        W.killed_mid_transfer, 3, timeout=180, env=T.env_of("tcp"), allow_exit={1: -9, 2: -9}
    )
    assert "TCP-KILLED-OK" in res[0].stdout, res[0]
    assert res[0].returncode == 0 and "DONE 0" in res[0].stdout, res[0]
    assert res[1].returncode == -9 and res[2].returncode == -9
