"""Worker code for test_memory_bounds: a victim worker and a faulty-but-authenticated peer.

Rank 0 is the victim, an RPC worker in a world of one that measures its own
memory (``VmRSS`` and ``VmHWM`` of ``/proc/self/status``). The peer (rank 1, or the
test process itself where the peer need not die: :func:`attack_declared`,
:func:`attack_partial`) holds the job
secret (``TENSORPLAY_JAX_RPC_SECRET``) but speaks the wire format by hand, over
``TPJ_TRANSPORT`` (``local``: the same-host socket; ``tcp``: the TCP link between
hosts, whose frames are the same-host socket's inline ones; ``grpc``: the gRPC stream).
They meet through marker files in ``TPJ_TMP``. The victim prints one
``RESULT {json}`` line with what it measured (MiB, seconds); the test checks it.

- :func:`declared_bytes`: the peer declares far more than it sends
  (``TPJ_ATTACK``: ``frame``, a body length of 1 GiB or two 512 MiB gRPC
  transfers, and a few KiB; ``segment``, a same-host frame whose 1 GiB
  shared-memory segment the peer never wrote). ``growth``: the victim's peak
  RSS over its baseline.
- :func:`partial_then_gone`: the peer declares 1 GiB, sends ``SENT_MIB`` of it,
  then closes the connection or dies (``TPJ_GONE``: ``close`` or ``kill``).
  ``held``: RSS over the baseline before that, once the heap's free memory was
  returned to the OS (``rss``: before that; ``heap_free``: what the allocator held
  free); ``freed_after``: seconds until it fell back under ``FREED_MIB``;
  ``link_freed_after``: seconds until the victim's object for that connection was
  gone (no reference left to it).
"""

from __future__ import annotations

import array
import ctypes
import fcntl
import json
import os
import queue
import signal
import socket
import struct
import termios
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tests.security._common import wait_until

MIB = 1 << 20
DECLARED = 1 << 30
SENT_MIB = 256  # MiB that do arrive in partial_then_gone
FREED_MIB = 96  # RSS over the baseline that counts as "freed"
SETTLE_S = 1.0  # the victim watches its peak this long after the peer's bytes were read
WAIT_S = 60.0  # longest wait for the other rank at any step
POLL_S = 0.02


def _tmp() -> Path:
    return Path(os.environ["TPJ_TMP"])


def _wait_for(name: str, timeout: float = WAIT_S) -> None:
    path = _tmp() / name
    wait_until(path.exists, timeout, f"marker {name}")


def _mark(name: str, text: str = "") -> None:
    (_tmp() / f"{name}.tmp").write_text(text)
    (_tmp() / f"{name}.tmp").rename(_tmp() / name)


def _status_mib(key: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    raise AssertionError(f"no {key} in /proc/self/status")


class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (``mallinfo2(3)``)."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd",
            "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
        )
    ]  # fmt: skip


def _glibc() -> Any:
    """This process's C library if it has glibc's ``malloc_trim`` and ``mallinfo2``, else None."""
    try:
        libc = ctypes.CDLL(None)
        libc.mallinfo2.restype = _MallInfo2
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
    except (OSError, AttributeError):
        return None
    return libc


def _heap_free_mib() -> float | None:
    """MiB the allocator holds free for reuse (None: not glibc)."""
    libc = _glibc()
    return None if libc is None else round(libc.mallinfo2().fordblks / MIB, 1)


def _return_free_heap() -> None:
    """Give the heap's free pages back to the OS (``malloc_trim(0)``), where glibc can."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


# ---------------------------------------------------------------------- the victim


def _victim(measure: Callable[[float, Any], dict[str, Any]]) -> None:
    from tensorplay_jax.distributed import rpc
    from tensorplay_jax.rpc import _agent

    os.environ["WORLD_SIZE"] = "1"
    rpc.init_rpc("victim", rank=0, world_size=1)
    agent = _agent.current_agent()
    served = agent.connections.advertised()  # local: [host id, address]; tcp: [host, port]
    local = served["local"][1] if "local" in served else ""
    tcp = served["tcp"][1] if "tcp" in served else 0
    base = _status_mib("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM restarts from here: it catches a short-lived peak too
    _mark("ready", json.dumps({"grpc": agent.address, "local": local, "tcp": tcp}))
    try:
        result = measure(base, agent)
    finally:
        _mark("measured")
    print("RESULT " + json.dumps({"base": round(base, 1), **result}), flush=True)
    rpc.shutdown()


def _measure_peak(base: float, agent: Any) -> dict[str, Any]:
    _wait_for("sent")
    time.sleep(SETTLE_S)
    return {"growth": round(_status_mib("VmHWM") - base, 1)}


def _measure_release(base: float, agent: Any) -> dict[str, Any]:
    _wait_for("sent")
    # The bytes were read (the peer saw its queue drain or got a later reply): they are held.
    rss = _status_mib("VmRSS") - base
    # Freed memory the allocator keeps for reuse is in RSS but held by nothing: how much
    # depends on how the receiving threads' allocations interleaved (tens of MiB more on
    # a loaded machine for gRPC's 4 MiB messages), so it is returned before measuring.
    heap_free = _heap_free_mib()
    _return_free_heap()
    held = _status_mib("VmRSS") - base
    server = agent.connections.get(os.environ["TPJ_TRANSPORT"]).server
    (link,) = server._links  # the peer's connection, as the victim's server knows it
    link_ref = weakref.ref(link)
    del link
    _mark("held")
    _wait_for("gone")
    t0 = time.monotonic()
    freed: dict[str, float] = {}
    while len(freed) < 2 and time.monotonic() < t0 + 10.0:
        if "rss" not in freed and _status_mib("VmRSS") - base <= FREED_MIB:
            freed["rss"] = round(time.monotonic() - t0, 2)
        if "link" not in freed and link_ref() is None:
            freed["link"] = round(time.monotonic() - t0, 2)
        time.sleep(POLL_S)
    return {
        "held": round(held, 1),
        "rss": round(rss, 1),
        "heap_free": heap_free,
        "after": round(_status_mib("VmRSS") - base, 1),
        "freed_after": freed.get("rss"),  # None: not within 10 s
        "link_freed_after": freed.get("link"),
    }


# ---------------------------------------------------------------------- the faulty peer


def _secret() -> str:
    return os.environ["TENSORPLAY_JAX_RPC_SECRET"]


def _request(mid: int) -> tuple[bytes, bytes]:
    """A small well-formed call (envelope, header)."""
    from tensorplay_jax.rpc import _codec
    from tests.rpc import _targets

    body = _codec.encode((_targets.add, (mid, 1), {}))
    assert not body.buffers
    return _codec.dumps_small([1, mid, {}]), bytes(body.header)


def _client_end(replies: queue.Queue) -> Any:
    """The faulty worker's end of a connection to the victim: replies' envelopes go to
    ``replies``."""
    from tensorplay_jax.rpc._link import Inbound
    from tensorplay_jax.rpc._socket import ClientEnd

    inbound = Inbound(
        on_message=lambda link, m: replies.put(bytes(m.envelope)),
        on_malformed=lambda link, e: None,
        on_closed=lambda link, reason: None,
    )
    return ClientEnd(peer="victim", me="faulty", secret=_secret(), inbound=inbound)


class _LocalPeer:
    """An authenticated same-host connection whose frames are written by hand."""

    def __init__(self, address: str) -> None:
        from tensorplay_jax.rpc import _local

        self.replies: queue.Queue = queue.Queue()
        self.link = _local.connect_local(address, _client_end(self.replies))
        self.sock = self.link._sock

    def frame(self, kind: int, length: int, body: bytes = b"", fd: int = -1) -> None:
        from tensorplay_jax.rpc._local import frames

        data = frames._FRAME.pack(length, kind) + body
        if fd < 0:
            self.sock.sendall(data)
        else:
            anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))]
            assert self.sock.sendmsg([data], anc) == len(data)

    def drained(self) -> None:
        """Wait until the victim has read everything sent (the socket's send queue is empty)."""

        def unread() -> int:
            out = fcntl.ioctl(self.sock.fileno(), termios.TIOCOUTQ, b"\0" * 4)
            return struct.unpack("i", out)[0]

        wait_until(lambda: unread() == 0, WAIT_S, "the victim reading our bytes")

    def probe(self) -> None:
        """Send a frame of no known kind and wait for the error it earns: frames are read in
        order, so everything sent before it was read."""
        self.frame(99, 4, b"junk")
        self.replies.get(timeout=WAIT_S)

    def close(self) -> None:
        self.link.close()


class _TcpPeer(_LocalPeer):
    """An authenticated TCP link (to the victim's loopback port) whose frames are written by
    hand: the same frames as the same-host socket's, none with a descriptor."""

    def __init__(self, port: int) -> None:
        from tensorplay_jax.rpc import _tcp

        self.replies: queue.Queue = queue.Queue()
        self.link = _tcp.connect_tcp(
            "127.0.0.1",
            port,
            _client_end(self.replies),
            lanes=1,  # one connection: the victim's server holds one link for it
        )
        self.sock = self.link._sock


class _GrpcPeer:
    """An authenticated gRPC stream whose packets are written by hand."""

    def __init__(self, address: str) -> None:
        import grpc

        from tensorplay_jax.rpc import _grpc

        self._out: queue.Queue = queue.Queue()
        self._channel = grpc.insecure_channel(address)
        stream = self._channel.stream_stream(_grpc.METHOD_PATH)
        md = _grpc.auth_metadata(_secret(), "faulty", address)
        self._call = stream(self._packets(), metadata=md, timeout=2 * WAIT_S)

    def _packets(self) -> Iterator[bytes]:
        while (p := self._out.get(timeout=2 * WAIT_S)) is not None:
            yield p

    def begin(self, tid: int, size: int) -> None:
        from tensorplay_jax.rpc import _framing

        env, header = b"\x93\x01\x00\x80", b"\xc0"
        pre = _framing._prelude(env, header, [size])
        self._out.put(_framing._BEGIN_HDR.pack(_framing._BEGIN, tid) + pre + env + header)

    def chunk(self, tid: int, off: int, data: bytes) -> None:
        from tensorplay_jax.rpc import _framing

        self._out.put(_framing._CHUNK_HDR.pack(_framing._CHUNK, tid, 0, off) + data)

    def probe(self) -> None:
        """Send a packet of no known kind and wait for the error it earns: packets are read
        in order, so everything sent before it was read. (A call would do too, but the
        agent's worker pool may hold a served call's arguments, the link among them.)"""
        self._out.put(b"\x09junk")
        for _ in self._call:  # the call's deadline bounds this wait
            return
        raise AssertionError("the stream ended before the reply")

    def close(self) -> None:
        self._out.put(None)
        self._call.cancel()
        self._channel.close()


def _connect() -> _LocalPeer | _GrpcPeer:
    _wait_for("ready")
    addresses = json.loads((_tmp() / "ready").read_text())
    if os.environ["TPJ_TRANSPORT"] == "local":
        return _LocalPeer(addresses["local"])
    if os.environ["TPJ_TRANSPORT"] == "tcp":
        return _TcpPeer(addresses["tcp"])
    return _GrpcPeer(addresses["grpc"])


def attack_declared() -> None:
    """The faulty peer of :func:`declared_bytes` (rank 1, or the test process itself)."""
    from tensorplay_jax.rpc import _framing
    from tensorplay_jax.rpc._local import frames

    peer = _connect()
    attack = os.environ["TPJ_ATTACK"]
    if isinstance(peer, _GrpcPeer):  # two transfers of 512 MiB, and 4 KiB of one of them
        peer.begin(1, DECLARED // 2)
        peer.begin(2, DECLARED // 2)
        peer.chunk(1, 0, b"\1" * 4096)
        peer.probe()
    elif attack == "frame":  # a body length of 1 GiB, and 4 KiB of the body
        peer.frame(frames._INLINE, DECLARED, b"\1" * 4096)
        peer.drained()
    else:  # a 1 GiB shared-memory segment with no page written
        fd = os.memfd_create("tpj-test-sparse", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        os.ftruncate(fd, DECLARED)
        # Sealed as a real segment is, so the receiver's never-written check is the one tried.
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
        env, header = _request(7)
        msg = _framing._prelude(env, header, [DECLARED]) + env + header
        body = frames._U64.pack(1) + msg
        peer.frame(frames._SHM, len(body), body, fd)
        os.close(fd)
        peer.probe()
    _mark("sent")
    _wait_for("measured")
    peer.close()


def attack_partial() -> None:
    """The faulty peer of :func:`partial_then_gone` (rank 1, or the test process itself
    unless ``TPJ_GONE`` is ``kill``)."""
    from tensorplay_jax.rpc._local import frames

    peer = _connect()
    block = b"\1" * (4 * MIB)
    if isinstance(peer, _GrpcPeer):
        peer.begin(1, DECLARED)
        for i in range(SENT_MIB // 4):
            peer.chunk(1, i * len(block), block)
        peer.probe()
    else:
        peer.frame(frames._INLINE, DECLARED)
        for _ in range(SENT_MIB // 4):
            peer.sock.sendall(block)
        peer.drained()
    _mark("sent")
    _wait_for("held")
    _mark("gone")
    if os.environ["TPJ_GONE"] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    peer.close()
    _wait_for("measured")


def _run(victim: Callable[[float, Any], dict[str, Any]], attacker: Callable[[], None]) -> None:
    if int(os.environ["RANK"]) == 0:
        _victim(victim)
    else:
        attacker()


def declared_bytes() -> None:
    """Rank 1 declares 1 GiB and sends a few KiB; rank 0 reports its peak RSS growth."""
    _run(_measure_peak, attack_declared)


def partial_then_gone() -> None:
    """Rank 1 sends ``SENT_MIB`` of a declared 1 GiB, then goes; rank 0 times the release."""
    _run(_measure_release, attack_partial)
