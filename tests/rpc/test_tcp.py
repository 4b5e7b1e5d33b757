"""The TCP link between hosts (``_tcp``): authentication first, long bodies, dead peers.

The multi-process tests run workers on loopback with the same-host transport
off, so pairs talk as workers on different hosts do.
"""

from __future__ import annotations

import contextlib
import gc
import queue
import socket
import time

import jax.numpy as jnp
import numpy as np
import pytest

from tensorplay_jax import rpc
from tensorplay_jax.rpc import _agent, _codec, _tcp, _tcp_lanes
from tensorplay_jax.rpc._framing import StreamError
from tensorplay_jax.rpc._link import Inbound
from tensorplay_jax.rpc._local import frames
from tensorplay_jax.rpc._socket import ClientEnd
from tensorplay_jax.runtime import handshake
from tests._worker import expect
from tests.rpc import _targets as T
from tests.rpc import _tcp_workers as W
from tests.rpc._jobs import rpc_job


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

    def end(self, *, peer: str, me: str, secret: str) -> ClientEnd:
        """A client's end whose replies come here."""
        return ClientEnd(peer=peer, me=me, secret=secret, inbound=Inbound(**self.kw()))


@pytest.fixture
def server():
    sink = _Sink()
    srv = _tcp.TcpServer(secret="s3cret", host="127.0.0.1", **sink.kw())
    yield srv, sink
    srv.stop()


def test_wrong_secret_is_rejected_before_anything_is_read(server):
    srv, sink = server
    with pytest.raises(OSError):  # the server closes the connection: no proof back
        _tcp.connect_tcp("127.0.0.1", srv.port, _Sink().end(peer="p", me="me", secret="wrong"))
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
    link = _tcp.connect_tcp("127.0.0.1", srv.port, _Sink().end(peer="srv", me="c", secret="s3cret"))
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


# ----------------------------------------------------------------- between workers
@pytest.fixture(scope="module")
def job():
    """Three workers on loopback that reach each other as other hosts do (``w0`` is here)."""
    with rpc_job(3, "tcp", timeout=60) as w:
        yield w


def _same(a: np.ndarray, b: object) -> bool:
    b = np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def test_workers_on_loopback_pair_over_the_tcp_link(job):
    assert rpc.rpc_sync("w1", T.add, args=(1, 2)) == 3
    assert type(_agent.current_agent().peers.links[1]).__name__ == "TcpLink"


def test_large_arrays_of_several_dtypes_round_trip_exactly(job):
    first = W.arrays(0)
    got = rpc.rpc_sync("w1", T.identity, args=(first,))
    assert all(_same(a, b) for a, b in zip(first, got, strict=True))
    assert all(isinstance(b, np.ndarray) and b.flags.writeable for b in got)
    # Received buffers are reused only once no array is left on them: the first
    # answer stays intact while later ones arrive (and small calls interleave).
    later = [W.arrays(s) for s in (1, 2, 3)]
    futs = [rpc.rpc_async("w1", T.identity, args=(x,)) for x in later]
    small = [rpc.rpc_async("w1", T.add, args=(i, 1)) for i in range(50)]
    assert rpc.wait_all(small) == [i + 1 for i in range(50)]
    for x, f in zip(later, futs, strict=True):
        assert all(_same(a, b) for a, b in zip(x, f.wait(), strict=True))
    assert all(_same(a, b) for a, b in zip(first, got, strict=True))


def test_a_jax_array_arrives_as_a_jax_array_exactly(job):
    j = jnp.asarray(W.arrays(0)[0])
    back = rpc.rpc_sync("w1", T.identity, args=(j,))
    assert isinstance(back, type(j)) and _same(np.asarray(j), back)


def test_a_peer_killed_mid_transfer_fails_the_call_cleanly(job):
    # w1 dies while its long reply is on the way; w2 while our long request is.
    t = time.monotonic()
    says = ["'w1'", "lost the connection"]
    expect(rpc.RpcPeerError, says, rpc.rpc_sync, "w1", W.reply_then_die, args=(512,))
    assert time.monotonic() - t < 20, time.monotonic() - t
    job.kill("w1")  # (reaped: it killed itself)
    big = np.ones(512 << 18, dtype=np.float32)
    rpc.rpc_sync("w2", T.die_soon, args=(0.05,))
    t = time.monotonic()
    says = ["'w2'", "lost the connection"]
    expect(rpc.RpcPeerError, says, rpc.rpc_sync, "w2", T.identity, args=(big,))
    assert time.monotonic() - t < 20, time.monotonic() - t
    job.kill("w2")


# ----------------------------------------------------------------- lanes
def _lanes_up(link: _tcp.TcpLink, n: int) -> None:
    deadline = time.monotonic() + 20
    while len(link.stripes.tx) < n - 1:
        assert time.monotonic() < deadline, "the link's lanes did not come up"
        time.sleep(0.01)


def _long(i: int) -> np.ndarray:
    return np.arange((3 << 20) + 5 + i, dtype=np.float32) * (i + 1)  # not a multiple of 64


def test_long_messages_go_over_the_lanes_whole_and_in_order_both_ways(server):
    srv, sink = server
    mine = _Sink()
    link = _tcp.connect_tcp(
        "127.0.0.1", srv.port, mine.end(peer="srv", me="c", secret="s3cret"), lanes=3
    )
    _lanes_up(link, 3)
    for i in range(3):  # long and small messages interleaved, from several threads' view
        link.send(b"long", *_enc([_long(i)]))
        link.send(b"small", *_enc([i]))
    got = [sink.messages.get(timeout=30) for _ in range(6)]
    assert [bytes(m.envelope) for _, m in got] == [b"long", b"small"] * 3
    for i in range(3):
        arr = _codec.decode(bytes(got[2 * i][1].header), got[2 * i][1].buffers)[0]
        assert _same(_long(i), arr) and arr.ctypes.data % 64 == 0
        assert _codec.decode(bytes(got[2 * i + 1][1].header), got[2 * i + 1][1].buffers) == [i]
    back = got[0][0]  # the server's end: its lanes carry replies
    _lanes_up(back, 3)
    assert back.lane_index == 0 and len(back.stripes.tx) == 2
    back.send(b"reply", *_enc([_long(7)]))
    _, m = mine.messages.get(timeout=30)
    assert _same(_long(7), _codec.decode(bytes(m.header), m.buffers)[0])
    link.close()
    assert sink.closed.get(timeout=10)


def _enc(values: list) -> tuple[bytes, list]:
    enc = _codec.encode(values)
    return enc.header, enc.buffers


def test_one_lane_sends_every_message_on_the_one_connection(server, monkeypatch):
    srv, sink = server
    monkeypatch.setenv("TENSORPLAY_JAX_RPC_TCP_LANES", "1")
    link = _tcp.connect_tcp("127.0.0.1", srv.port, _Sink().end(peer="srv", me="c", secret="s3cret"))
    link.send(b"long", *_enc([_long(0)]))
    peer, m = sink.messages.get(timeout=30)
    assert _same(_long(0), _codec.decode(bytes(m.header), m.buffers)[0])
    assert link.stripes.count == 0 and not peer.stripes.lanes and peer.stripes.count == 0
    link.close()


@pytest.mark.parametrize("value", ["0", "9", "two"])
def test_a_bad_lane_count_names_the_setting(monkeypatch, value):
    monkeypatch.setenv("TENSORPLAY_JAX_RPC_TCP_LANES", value)
    with pytest.raises(ValueError, match=r"TENSORPLAY_JAX_RPC_TCP_LANES=.*from 1"):
        _tcp_lanes.lane_count()


def test_a_lane_that_closes_mid_message_closes_the_link_and_delivers_nothing(server):
    srv, sink = server
    link = _tcp.connect_tcp(
        "127.0.0.1", srv.port, _Sink().end(peer="srv", me="c", secret="s3cret"), lanes=2
    )
    _lanes_up(link, 2)
    n = 8 << 20
    bounds = _tcp_lanes.cuts(n, 2)
    head = frames._FRAME.pack(n, _tcp._STRIPED) + _tcp._STRIPE.pack(2)
    link._sock.sendall(head + b"\1" * bounds[1])  # part 0 whole
    lane = link.stripes.tx[0]
    lane._sock.sendall(frames._FRAME.pack(n - bounds[1], _tcp._PART) + b"\2" * (1 << 20))
    lane._sock.shutdown(socket.SHUT_RDWR)  # the rest of part 1 never comes
    assert sink.closed.get(timeout=10)
    assert sink.messages.empty()
    assert not link.alive or _gone(link)


def _gone(link: _tcp.TcpLink) -> bool:
    deadline = time.monotonic() + 10
    while link.alive and time.monotonic() < deadline:
        time.sleep(0.01)
    return not link.alive


def _raw(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    handshake.authenticate(sock, b"s3cret", "raw", _tcp._MAGIC)
    sock.settimeout(10)
    return sock


def _hung_up(sock: socket.socket) -> bool:
    with contextlib.suppress(ConnectionResetError):
        while sock.recv(1 << 16):
            pass
    return True


def test_a_striped_frame_on_a_link_without_lanes_is_answered_and_hung_up(server):
    srv, sink = server
    with _raw(srv.port) as sock:
        sock.sendall(frames._FRAME.pack(8 << 20, _tcp._STRIPED) + _tcp._STRIPE.pack(2))
        assert _hung_up(sock)
    assert sink.closed.get(timeout=10)
    assert "STRIPED frame over 2 lanes, on a link of 1" in str(sink.malformed[0])


def test_a_part_frame_off_a_lane_is_answered_and_hung_up(server):
    srv, sink = server
    with _raw(srv.port) as sock:
        sock.sendall(frames._FRAME.pack(4 << 20, _tcp._PART) + b"\0" * 1024)
        assert _hung_up(sock)
    assert sink.closed.get(timeout=10)
    assert "not a lane" in str(sink.malformed[0])


def test_a_lane_for_a_link_the_server_does_not_hold_is_hung_up(server, monkeypatch):
    srv, sink = server
    monkeypatch.setattr(handshake, "HANDSHAKE_TIMEOUT_S", 0.5)  # how long it waits for the link
    hello = _tcp_lanes.hello(b"x" * 16, 1, 2)
    with _raw(srv.port) as sock:
        sock.sendall(frames._FRAME.pack(len(hello), _tcp._LANE) + hello)
        assert _hung_up(sock)
    assert sink.closed.get(timeout=10)
    assert "does not hold" in str(sink.malformed[0])
    assert sink.messages.empty()


def test_a_lane_that_arrives_as_its_server_stops_ends_its_connection_quietly():
    """A stopped server's waiting lane gives up with ConnectionError (its connection closes,
    ``on_closed``), not a protocol error for ``on_malformed`` to report: the stop was asked
    for. (A doctest printed such a report into a later example's output.)"""
    registry = _tcp_lanes.Registry()
    registry.close()
    with pytest.raises(ConnectionError, match="arrived as the server stopped"):
        registry.find(b"token", 1.0)
    fresh = _tcp_lanes.Registry()
    with pytest.raises(StreamError, match="does not hold"):
        fresh.find(b"token", 0.01)
