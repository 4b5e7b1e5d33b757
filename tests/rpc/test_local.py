"""The same-host transport (``_local``): authentication first, inline and shared-memory frames."""

from __future__ import annotations

import contextlib
import gc
import os
import queue
import socket
import threading
import time
import weakref

import hypothesis
import numpy as np
import pytest
from hypothesis import strategies as st

from tensorplay_jax.rpc import _codec, _local, _socket
from tensorplay_jax.rpc._link import Inbound
from tensorplay_jax.rpc._socket import ClientEnd
from tests._procs import reported
from tests.rpc import _workers as W

pytestmark = pytest.mark.skipif(not _local.available(), reason="needs Linux memfd + Unix sockets")


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
    srv = _local.LocalServer(secret="s3cret", **sink.kw())
    yield srv, sink
    srv.stop()


def test_wrong_secret_is_rejected_before_anything_is_read(server):
    srv, sink = server
    with pytest.raises(OSError):
        _local.connect_local(srv.address, _Sink().end(peer="p", me="me", secret="wrong"))
    # a raw client that skips the handshake: its bytes are never parsed
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    raw.connect("\0" + srv.address)
    raw.recv(64)
    raw.sendall(b"\x00" * 66 + b"\x09" * 100)
    raw.settimeout(5)
    with contextlib.suppress(ConnectionResetError):  # reset: closed with our bytes unread
        assert raw.recv(64) == b""  # closed by the server
    raw.close()
    assert sink.messages.empty() and not sink.malformed


def test_small_and_shared_memory_messages_round_trip(server):
    srv, sink = server
    client = _Sink()
    link = _local.connect_local(srv.address, client.end(peer="srv", me="cli", secret="s3cret"))
    small = np.arange(5, dtype=np.float32)
    big = np.arange(3 << 20, dtype=np.int32)[::2]  # non-contiguous, 6 MiB once packed
    for value in (small, {"a": big, "b": [small, b"xyz"]}):
        enc = _codec.encode(value)
        link.send(b"env", enc.header, enc.buffers)
        srv_link, m = sink.messages.get(timeout=10)
        assert srv_link.peer == "cli" and bytes(m.envelope) == b"env"
        got = _codec.decode(bytes(m.header), m.buffers)
        if isinstance(value, dict):
            assert np.array_equal(got["a"], big) and got["a"].flags.writeable
            assert np.array_equal(got["b"][0], small) and got["b"][1] == b"xyz"
        else:
            assert np.array_equal(got, small)
    # replies travel back on the same connection
    srv_link.send(b"reply", _codec.encode(7).header, [])
    _, m = client.messages.get(timeout=10)
    assert bytes(m.envelope) == b"reply"
    link.close()
    assert sink.closed.get(timeout=10)
    assert client.closed.get(timeout=10)


def test_many_senders_interleave_whole_messages(server):
    srv, sink = server
    link = _local.connect_local(srv.address, _Sink().end(peer="srv", me="cli", secret="s3cret"))
    payload = np.ones(200_000, dtype=np.uint8)  # fills the socket: exercises the backlog

    def send(i: int) -> None:
        for j in range(20):
            enc = _codec.encode((i, j, payload if j % 3 else None))
            link.send(b"e", enc.header, enc.buffers)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    seen: dict[int, list[int]] = {i: [] for i in range(4)}
    for _ in range(80):
        _, m = sink.messages.get(timeout=20)
        i, j, p = _codec.decode(bytes(m.header), m.buffers)
        assert p is None or p.sum() == payload.size
        seen[i].append(j)
    for t in threads:
        t.join()
    assert all(v == list(range(20)) for v in seen.values()), seen
    link.close()


@pytest.mark.parametrize(
    "switch, spin_us, link, spins",
    [
        ("1", None, "LocalLink", True),
        ("1", "0", "LocalLink", False),
        ("0", None, "TcpLink", True),  # reached as another host is: the TCP link
        ("0/0", None, "Link", True),  # the TCP link off too: gRPC
    ],
)
def test_same_host_peers_use_the_local_transport_unless_switched_off(
    workers, switch, spin_us, link, spins
):
    local, _, tcp = switch.partition("/")
    env = {"TENSORPLAY_JAX_RPC_LOCAL": local, "TENSORPLAY_JAX_RPC_TCP": tcp or "1"}
    if spin_us is not None:  # readers sleep at once: the link works the same, only slower
        env["TENSORPLAY_JAX_RPC_SPIN_US"] = spin_us
    res = workers(W.transport, 2, timeout=120, env=env)
    got = reported(res[0])
    assert got["link"] == link, res[0]
    assert got["spins"] is spins, res[0]


def test_segments_come_back_for_reuse_once_the_receiver_drops_its_arrays(server):
    srv, sink = server
    link = _local.connect_local(srv.address, _Sink().end(peer="srv", me="cli", secret="s3cret"))
    enc = _codec.encode(np.ones(1 << 20, dtype=np.float32))
    link.send(b"e", enc.header, enc.buffers)
    _, m = sink.messages.get(timeout=10)
    got = _codec.decode(bytes(m.header), m.buffers)
    assert len(link._lent) == 1  # lent while the receiver holds an array on it
    del m, got
    deadline = time.monotonic() + 10
    while link._lent and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not link._lent  # released without waiting for the garbage collector
    link.close()


def test_codec_holds_no_reference_cycles_to_arrays():
    gc.disable()
    try:
        x = np.ones(10)
        ref = weakref.ref(x)
        enc = _codec.encode([x, (x, {"k": x})])
        del x, enc
        assert ref() is None
        y = np.ones(10)
        enc = _codec.encode(y)
        bufs = [np.frombuffer(bytearray(b), np.uint8) for b in enc.buffers]
        out = _codec.decode(enc.header, bufs)
        ref = weakref.ref(out.base if out.base is not None else out)
        del out, enc, bufs
        assert ref() is None
    finally:
        gc.enable()


def test_reader_does_frame_work_inline_and_is_relieved_when_it_blocks():
    """Quick frames run on the reading thread; one that blocks gets reading handed on."""
    from tensorplay_jax.runtime.settings import RPC_INLINE_DETACH_S

    gate = threading.Event()
    seen: queue.Queue = queue.Queue()

    def on_message(link, m):
        tag = bytes(m.envelope)
        seen.put((tag, threading.get_ident(), _socket.on_reader_thread(), time.monotonic()))
        if tag == b"block":
            assert gate.wait(30)  # opened by the handler of a LATER frame on this link
        elif tag == b"open":
            gate.set()

    srv = _local.LocalServer(
        secret="s3cret", on_message=on_message, on_malformed=print, on_closed=lambda *a: None
    )
    link = _local.connect_local(srv.address, _Sink().end(peer="srv", me="cli", secret="s3cret"))
    try:
        for _ in range(3):
            link.send(b"quick", b"\xc0")
        quick = [seen.get(timeout=10) for _ in range(3)]
        assert all(inline for _, _, inline, _ in quick)
        assert len({tid for _, tid, _, _ in quick}) == 1  # no hand-off between quick frames
        t0 = time.monotonic()
        link.send(b"block", b"\xc0")
        link.send(b"open", b"\xc0")
        got = [seen.get(timeout=10) for _ in range(2)]
        assert [g[0] for g in got] == [b"block", b"open"]
        assert got[1][1] != got[0][1]  # a spare thread read and ran the later frame
        # handed on after RPC_INLINE_DETACH_S (plus a watchdog tick and scheduling)
        assert RPC_INLINE_DETACH_S <= got[1][3] - t0 < 5.0
        assert gate.wait(10)
    finally:
        link.close()
        srv.stop()


def test_a_relieved_frame_that_ends_leaves_the_blocked_reader_watched():
    """A frame relieved for running long ends while the frame read after it blocks: the
    watchdog still hands reading on, so the frame that unblocks it is read."""
    release_first = threading.Event()
    gate = threading.Event()
    seen: queue.Queue = queue.Queue()

    def on_message(link, m):
        tag = bytes(m.envelope)
        seen.put((tag, threading.get_ident()))
        if tag == b"first":
            assert release_first.wait(30)  # relieved by the watchdog while it waits
        elif tag == b"second":
            release_first.set()  # the first frame's work ends now, while this one blocks
            assert gate.wait(30)  # opened by the handler of a LATER frame on this link
        elif tag == b"open":
            gate.set()

    srv = _local.LocalServer(
        secret="s3cret", on_message=on_message, on_malformed=print, on_closed=lambda *a: None
    )
    link = _local.connect_local(srv.address, _Sink().end(peer="srv", me="cli", secret="s3cret"))
    try:
        link.send(b"first", b"\xc0")
        link.send(b"probe", b"\xc0")  # read by another thread once the first is relieved
        (_, first_tid), (_, probe_tid) = seen.get(timeout=10), seen.get(timeout=10)
        assert probe_tid != first_tid
        link.send(b"second", b"\xc0")
        link.send(b"open", b"\xc0")
        tags = [seen.get(timeout=10)[0] for _ in range(2)]
        assert tags == [b"second", b"open"]
        assert gate.wait(10)
    finally:
        gate.set()
        release_first.set()
        link.close()
        srv.stop()


def test_a_release_read_after_the_link_closed_is_not_malformed(server):
    """A RELEASE the peer sent before this end closed, read after it closed (the link then
    holds no lent segment: closing let them all go), is not reported as malformed."""
    srv, sink = server
    client = _Sink()
    gate, holding = threading.Event(), threading.Event()

    def on_message(link, m):
        holding.set()
        assert gate.wait(30)  # the reader waits here while the RELEASE arrives behind it

    inbound = Inbound(
        on_message=on_message,
        on_malformed=lambda link, e: client.malformed.append(e),
        on_closed=lambda link, reason: client.closed.put(reason),
    )
    end = ClientEnd(peer="srv", me="cli", secret="s3cret", inbound=inbound, max_threads=1)
    link = _local.connect_local(srv.address, end)  # one reader: the RELEASE waits for it
    try:
        enc = _codec.encode(np.ones(1 << 20, dtype=np.float32))
        link.send(b"e", enc.header, enc.buffers)
        srv_link, m = sink.messages.get(timeout=10)
        assert len(link._lent) == 1
        srv_link.send(b"hold", b"\xc0")
        assert holding.wait(10)
        del m  # the server's release thread sends RELEASE now
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(BlockingIOError):
                if link._sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT):
                    break
            time.sleep(0.01)
        else:
            pytest.fail("the RELEASE never arrived")
        link.close()
        assert not link._lent
    finally:
        gate.set()
    assert client.closed.get(timeout=10)
    assert client.malformed == []


def _segment_with(buffers: list) -> tuple:
    """A fresh segment holding ``buffers`` (by the mapped copy), and their sizes."""
    from tensorplay_jax.rpc._local import segments

    sizes = [memoryview(b).nbytes for b in buffers]
    seg = segments._Pool(0).take(segments._offsets(sizes)[-1])
    segments._fill(seg, buffers)
    return seg, sizes


def test_the_mapped_copy_writes_what_pwrite_writes():
    from tensorplay_jax.rpc._local import segments

    rng = np.random.default_rng(0)
    buffers = [
        memoryview(rng.standard_normal((300, 70)).astype(np.float32)),  # 2-D, not bytes
        memoryview(b""),
        memoryview(rng.integers(0, 255, 100_003, np.uint8)),  # not a multiple of 64
        memoryview(np.arange(5, dtype=np.int64)),
    ]
    fast, sizes = _segment_with(buffers)
    plain = segments._Pool(0).take(fast.size)
    segments._fill_by_pwrite(plain.fd, buffers)
    try:
        end = segments._offsets(sizes)[-1]
        assert np.array_equal(fast.memory()[:end], plain.memory()[:end])
        for b, off in zip(buffers, segments._offsets(sizes), strict=False):
            assert fast.memory()[off : off + b.nbytes].tobytes() == b.tobytes()
    finally:
        fast.close()
        plain.close()


@pytest.mark.parametrize("threads", [2, 3])
def test_the_parallel_copy_writes_what_the_one_thread_copy_writes(monkeypatch, threads):
    from tensorplay_jax.rpc._local import segments

    monkeypatch.setattr(segments._copiers, "threads", threads)
    rng = np.random.default_rng(1)
    buffers = [
        memoryview(rng.integers(0, 255, 6_000_003, np.uint8)),  # not a multiple of 64
        memoryview(b""),
        memoryview(rng.standard_normal((700, 1000)).astype(np.float32)),  # 2-D, not bytes
        memoryview(np.arange(7, dtype=np.int64)),
    ]
    sizes = [b.nbytes for b in buffers]
    assert sum(sizes) >= segments._PARALLEL_BYTES  # else it is the one-thread copy itself
    end = segments._offsets(sizes)[-1]
    plain, fast = segments._Pool(0).take(end), segments._Pool(0).take(end)
    try:
        fast.memory()[:end] = 0xAB  # the padding must be left as it was, as _fill leaves it
        plain.memory()[:end] = 0xAB
        segments._fill(plain, buffers)
        segments._fill_in_parallel(fast, buffers)
        assert np.array_equal(fast.memory()[:end], plain.memory()[:end])
    finally:
        fast.close()
        plain.close()


_FORKED_COPY = """
import os, sys
import numpy as np
from tensorplay_jax.rpc._local import segments
bufs = [memoryview(np.arange(3_000_000, dtype=np.float32))]  # 12 MB: the pool copies a piece
def copied():
    seg = segments._Pool(0).take(segments._offsets([b.nbytes for b in bufs])[-1])
    segments._fill_in_parallel(seg, bufs)
    return seg.memory()[: bufs[0].nbytes].tobytes() == bufs[0].tobytes()
assert copied()  # the parent's pool threads are running now
pid = os.fork()
if pid == 0:
    os._exit(0 if copied() else 3)
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status))
"""


def test_a_forked_child_copies_large_messages_with_threads_of_its_own():
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", _FORKED_COPY], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "child 0", out.stdout + out.stderr


def test_after_the_pool_is_shut_down_the_caller_copies_every_piece(monkeypatch):
    import concurrent.futures

    from tensorplay_jax.rpc._local import segments

    copiers = segments._Copiers()
    copiers.threads = 3
    copiers._pool = concurrent.futures.ThreadPoolExecutor(2)
    copiers._pool.shutdown()  # as at interpreter exit: submit raises RuntimeError
    monkeypatch.setattr(segments, "_copiers", copiers)
    buffers = [memoryview(np.arange(3_000_000, dtype=np.float32))]
    seg = segments._Pool(0).take(segments._offsets([buffers[0].nbytes])[-1])
    try:
        segments._fill_in_parallel(seg, buffers)
        assert seg.memory()[: buffers[0].nbytes].tobytes() == buffers[0].tobytes()
    finally:
        seg.close()


@hypothesis.given(sizes=st.lists(st.integers(0, 50), max_size=6), k=st.integers(1, 5))
def test_the_copy_pieces_cover_every_byte_once_in_order(sizes, k):
    from tensorplay_jax.rpc._local.segments import _pieces

    pieces = _pieces(sizes, k)
    assert len(pieces) == k
    covered = [(i, a, b) for piece in pieces for i, a, b in piece]
    assert all(a < b for _, a, b in covered)
    flat = [(i, j) for i, a, b in covered for j in range(a, b)]
    assert flat == [(i, j) for i, n in enumerate(sizes) for j in range(n)]
    per_piece = [sum(b - a for _, a, b in piece) for piece in pieces]
    assert max(per_piece) - min(per_piece) <= 1


def test_a_kept_mapping_gives_what_a_fresh_mapping_gives():
    from tensorplay_jax.rpc._local import segments

    want = [np.arange(n, dtype=np.uint8) for n in (70_000, 0, 1 << 20)]
    seg, sizes = _segment_with(want)
    freed: list[str] = []
    try:
        plain = segments._map(os.dup(seg.fd), sizes, lambda: freed.append("plain"))
        maps = segments._Mappings()
        kept = maps.map(1, os.dup(seg.fd), sizes, lambda: freed.append("kept"))
        for a, b, w in zip(plain, kept, want, strict=True):
            assert np.array_equal(a, w) and np.array_equal(b, w) and b.flags.writeable
            assert b.size == 0 or b.ctypes.data % 64 == 0  # aligned: device_put may alias it
        assert freed == []
        del plain, a, b
        gc.collect()
        assert freed == ["plain"]
        del kept
        assert freed == ["plain", "kept"]  # each message's arrays, not the kept mapping
    finally:
        seg.close()


def test_a_reused_segment_is_mapped_once_and_shows_each_message(server):
    from tensorplay_jax.rpc._local import segments

    srv, sink = server
    link = _local.connect_local(srv.address, _Sink().end(peer="srv", me="cli", secret="s3cret"))
    try:
        for i in range(6):
            enc = _codec.encode(np.full(1 << 18, i, dtype=np.float32))
            link.send(b"e", enc.header, enc.buffers)
            srv_link, m = sink.messages.get(timeout=10)
            got = _codec.decode(bytes(m.header), m.buffers)
            assert got.shape == (1 << 18,) and np.all(got == i), i
            del m, got  # released: the next message reuses the segment
            deadline = time.monotonic() + 10
            while link._lent and time.monotonic() < deadline:
                time.sleep(0.005)
            assert not link._lent
        assert segments._mapped.kept(srv_link._owner) == 1  # mapped once, for all six
    finally:
        link.close()
    assert sink.closed.get(timeout=10)
    assert segments._mapped.kept(srv_link._owner) == 0  # the kept mappings go with the link


def test_arrays_held_on_segments_stay_correct_while_later_messages_reuse_them(server):
    """JAX arrays that alias received segments keep their values while the sender reuses
    every segment released around them (and the receiver its kept mappings)."""
    import jax.numpy as jnp

    srv, sink = server
    link = _local.connect_local(srv.address, _Sink().end(peer="srv", me="cli", secret="s3cret"))
    n = 1 << 18  # 1 MiB of float32: a segment each
    held = {}
    try:
        for i in range(24):
            enc = _codec.encode(jnp.full(n, i, dtype=jnp.float32))
            link.send(b"e", enc.header, enc.buffers)
            _, m = sink.messages.get(timeout=10)
            got = _codec.decode(bytes(m.header), m.buffers)  # a jax.Array on the segment
            del m
            if i % 3 == 0:
                held[i] = got  # the others are dropped, their segments reused by later ones
            del got
            # wait until every dropped message's segment is back (jaxlib lets go of an
            # aliased host array on a later call into it: device_put one scalar)
            deadline = time.monotonic() + 10
            while len(link._lent) > len(held) and time.monotonic() < deadline:
                jnp.zeros(())
                time.sleep(0.005)
            assert len(link._lent) == len(held)
        for i, x in held.items():
            np.testing.assert_array_equal(np.asarray(x), np.full(n, i, np.float32))
    finally:
        link.close()


def test_kept_mappings_stay_within_their_limit_and_go_with_their_owner():
    from tensorplay_jax.rpc._local import segments

    maps = segments._Mappings(limit=2 << 20)
    segs = [_segment_with([np.full(1 << 20, i, np.uint8)])[0] for i in range(3)]
    try:
        got = [
            maps.map(1 + i % 2, os.dup(s.fd), [1 << 20], lambda: None) for i, s in enumerate(segs)
        ]
        assert maps.kept(1) + maps.kept(2) == 2  # the first of three 1 MiB mappings went
        assert maps.kept(1) == 1 and maps.kept(2) == 1
        for i, (arr,) in enumerate(got):
            assert np.all(arr == i)  # the arrays keep an evicted mapping mapped
        maps.clear(2)
        assert maps.kept(2) == 0 and maps.kept(1) == 1
    finally:
        for s in segs:
            s.close()
