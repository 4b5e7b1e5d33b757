"""The link between hosts when TLS is off: one authenticated TCP connection per pair of workers.

gRPC's Python stream copies every chunk of a large array and hands each
message through several threads, where a plain socket sends an array's
bytes from where they lie (``benchmarks/rpc.py --transport tcp`` against
``--transport grpc`` measures the difference). So a pair of workers on
different hosts talks over a plain TCP connection (transport ``"tcp"``, see
``rpc/transports``), built on the socket base (``rpc/_socket``: frames,
reader baton, watchdog, accept loop), without shared memory: every message
travels in an ``INLINE`` frame, sent with ``sendmsg`` straight from the
arrays' buffers (no join, no copy) and received with ``recv_into`` into a
mapping that grows with the bytes that arrive (a declared length takes no
memory), on which the decoded arrays then sit (no copy).

- Authentication first: the job-secret HMAC challenge both ways
  (``runtime.handshake``, magic ``TPJTCP01``); nothing else on a connection is
  read before it succeeds.
- The listening socket binds the worker's listen address (``listen_addr``);
  the rendezvous entry advertises it as ``host:port`` with the host peers
  reach this worker by.
- The agent uses the next transport of its list (gRPC by default) with TLS
  (every byte on TLS), when this one is off (``TENSORPLAY_JAX_RPC_TCP=0``),
  and when a connection to the peer's port fails (a firewall that opens only
  the gRPC port).
- A peer that exits closes the connection: the link reports it and the
  agent fails the calls pending on it, as for a gRPC stream.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import mmap
import socket
import sys
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from tensorplay_jax.rpc._framing import _PRELUDE, StreamError, pack_message
from tensorplay_jax.rpc._link import Inbound
from tensorplay_jax.rpc._socket import ClientEnd
from tensorplay_jax.rpc._socket.frames import _FRAME, _INLINE, _Reader
from tensorplay_jax.rpc._socket.link import _NOSIGNAL, SocketLink
from tensorplay_jax.rpc._socket.server import SocketServer, SocketTransport, start_reading
from tensorplay_jax.rpc._transport import Site
from tensorplay_jax.runtime import handshake

__all__ = ["TcpLink", "TcpServer", "TcpTransport", "connect_tcp"]

log = logging.getLogger(__name__)

_MAGIC = b"TPJTCP01"
_JOIN_BYTES = 64 << 10  # a message up to this size is joined into one send
_MAX_IOV = 512  # buffers per sendmsg (Linux allows 1024)
_STEP = 4 << 20  # a long body is received (and its fresh pages taken) this much at a time
_ROUND = 1 << 20  # receive mappings are made in multiples of this
# Mappings whose arrays are all gone wait here for the next long body (the last _POOL
# freed, none over _POOL_MAX_BYTES): faulting in fresh pages costs as much as the copy.
_POOL, _POOL_MAX_BYTES = 2, 256 << 20
_MAP_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000 if sys.platform.startswith("linux") else 0)
_MADV_POPULATE_WRITE = getattr(
    mmap, "MADV_POPULATE_WRITE", 23 if sys.platform.startswith("linux") else None
)
_WAITALL = getattr(socket, "MSG_WAITALL", 0)
_free: collections.deque[mmap.mmap] = collections.deque()


class _Parts:
    """A message still to send, as views (its frame head, then its buffers)."""

    __slots__ = ("n", "views")

    def __init__(self, views: list[memoryview]) -> None:
        self.views = views
        self.n = sum(v.nbytes for v in views)

    def __len__(self) -> int:
        return self.n

    def after(self, sent: int) -> _Parts:
        views = self.views
        i = 0
        while sent and sent >= views[i].nbytes:
            sent -= views[i].nbytes
            i += 1
        rest = views[i:]
        if sent:
            rest = [rest[0][sent:], *rest[1:]]
        return _Parts(rest)


def _flat(b: Any) -> memoryview:
    mv = b if isinstance(b, memoryview) else memoryview(b)
    return mv.cast("B") if mv.format != "B" or mv.ndim != 1 else mv


def _give(m: mmap.mmap) -> None:
    """Keep ``m`` for a later body, in place of the oldest kept (from a finalizer: no lock)."""
    if len(m) <= _POOL_MAX_BYTES:
        _free.append(m)
        while len(_free) > _POOL:
            with contextlib.suppress(IndexError):
                _free.popleft()


def _take(n: int) -> tuple[mmap.mmap, bool]:
    """A mapping of at least ``n`` bytes, and whether its pages are already in (pooled)."""
    for _ in range(len(_free)):
        try:
            m = _free.popleft()
        except IndexError:
            break
        if n <= len(m) <= 2 * n:
            return m, True
        _free.append(m)
    size = -(-n // _ROUND) * _ROUND
    try:
        # Lazy: the declared length takes no memory; pages come in as bytes arrive.
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_NORESERVE
        return mmap.mmap(-1, size, flags=flags), False
    except (OSError, OverflowError, ValueError) as e:
        raise StreamError(f"cannot receive a frame of {n} bytes: {e}") from None


class _TcpReader(_Reader):
    """Frames off a TCP socket; a long body goes into a (pooled) mapping, read a step at a
    time with ``MSG_WAITALL``; its arrays sit on that mapping, which returns to the pool
    once none is left."""

    def _large(self, n: int) -> Any:  # type: ignore[override]
        have = self._hi - self._lo  # < n: the read buffer is shorter than a long body
        pad = 0
        if have >= _PRELUDE.size:  # start the body so that its first buffer is 64-byte aligned
            env_len, hdr_len, nbufs = _PRELUDE.unpack_from(self._buf, self._lo)
            pad = -(_PRELUDE.size + 8 * nbufs + env_len + hdr_len) % 64
        m, ready = _take(n + pad)
        base = np.frombuffer(m, np.uint8, count=n, offset=pad)
        view = memoryview(base)
        view[:have] = self._buf[self._lo : self._hi]
        self._lo = self._hi = 0
        while have < n:
            stop = min(n, have + _STEP)
            if not ready and _MADV_POPULATE_WRITE is not None:
                start = pad + have - (pad + have) % mmap.PAGESIZE
                with contextlib.suppress(OSError):  # only advice: the copy faults pages in
                    m.madvise(_MADV_POPULATE_WRITE, start, pad + stop - start)
            got = self._sock.recv_into(view[have:stop], stop - have, _WAITALL)
            if not got:
                raise EOFError("stream closed")
            have += got
            self._got += got
        weakref.finalize(base, _give, m)
        return view


def _tune(sock: socket.socket) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class TcpLink(SocketLink):
    """A ``SocketLink`` on a TCP socket: every message inline, buffers sent where they lie."""

    _reader_type = _TcpReader
    _kind = "tcp"

    def send(self, env: bytes, header: bytes, buffers: Sequence[Any] = ()) -> None:
        """Send one message (thread-safe, never blocks for long); dropped once the link is dead."""
        if not self.alive:
            return
        parts = pack_message(env, header, [_flat(b) for b in buffers])
        size = sum(len(p) if isinstance(p, bytes) else p.nbytes for p in parts)
        head = _FRAME.pack(size, _INLINE)
        if size <= _JOIN_BYTES:
            self._write(b"".join([head, *parts]), -1)
        else:
            first = b"".join([head, *parts[:3]])
            self._write(_Parts([memoryview(first), *parts[3:]]), -1)  # type: ignore[arg-type]

    def _send_some(self, data: Any, fd: int, flags: int) -> int:
        if isinstance(data, _Parts):
            return self._sock.sendmsg(data.views[:_MAX_IOV], (), flags | _NOSIGNAL)
        return self._sock.send(data, flags | _NOSIGNAL)

    def _rest(self, data: Any, sent: int) -> Any:
        if isinstance(data, _Parts):
            return data.after(sent)
        return memoryview(data)[sent:]


class TcpServer(SocketServer):
    """Accepts TCP connections on ``host`` (any free port: ``port``), authenticates each, and
    reports what arrives on it to ``inbound`` (or the three callbacks given by keyword).

    Example:
      >>> import queue
      >>> got = queue.Queue()
      >>> cb = dict(on_message=lambda link, m: got.put(m), on_malformed=print,
      ...           on_closed=lambda link, reason: None)
      >>> srv = TcpServer(secret="s3cret", host="127.0.0.1", **cb)
      >>> end = ClientEnd(peer="srv", me="w0", secret="s3cret", inbound=Inbound(**cb))
      >>> link = connect_tcp("127.0.0.1", srv.port, end)
      >>> link.send(b"env", b"hdr", [memoryview(bytes(100_000))])
      >>> m = got.get(timeout=10); bytes(m.envelope), m.buffers[0].nbytes
      (b'env', 100000)
      >>> link.close(); srv.stop()
    """

    _link_type = TcpLink
    _magic = _MAGIC

    def __init__(
        self,
        *,
        secret: str,
        host: str,
        inbound: Inbound | None = None,
        max_threads: int = 17,
        **callbacks: Any,
    ) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.create_server((host, 0), family=family, backlog=128)
        self.port: int = sock.getsockname()[1]
        super().__init__(sock, secret=secret, inbound=inbound, max_threads=max_threads, **callbacks)

    def _tune(self, conn: socket.socket) -> None:
        _tune(conn)


def connect_tcp(host: str, port: int, end: ClientEnd) -> TcpLink:
    """Connect ``end`` to the ``TcpServer`` at ``host:port``, authenticate, and start reading
    replies.

    Raises:
      OSError: no server there, the connection timed out, or the handshake failed.
    """
    sock = socket.create_connection((host, port), timeout=handshake.HANDSHAKE_TIMEOUT_S)
    try:
        _tune(sock)
        handshake.authenticate(sock, end.secret.encode(), end.me, _MAGIC)
    except BaseException:
        sock.close()
        raise
    link = TcpLink(sock, end.peer, end.max_threads)
    return start_reading(link, end.inbound)  # type: ignore[return-value]


class TcpTransport(SocketTransport):
    """The TCP link as the agent holds it (``rpc/transports.Transport``).

    Advertises ``[host, port]``: the host the peers reach this worker by, the
    port its ``TcpServer`` took on the listen address.

    Example:
      >>> t = TcpTransport()
      >>> t.reaches(["10.0.0.2", 41000]), t.reaches(["10.0.0.2", 0]), t.reaches(None)
      (True, False, False)
    """

    slow_connect = True  # another host: a round trip, or a timeout if it is gone

    def serve(self, site: Site) -> bool:
        self._site = site
        self.server = TcpServer(
            secret=site.secret, host=site.listen, inbound=site.inbound, max_threads=site.max_threads
        )
        return True

    def advertise(self) -> Any:
        assert isinstance(self.server, TcpServer) and self._site is not None
        return [self._site.advertise, self.server.port]

    def reaches(self, entry: Any) -> bool:
        return (
            isinstance(entry, list)
            and len(entry) == 2
            and isinstance(entry[0], str)
            and type(entry[1]) is int
            and 0 < entry[1] < 65536
        )

    def connect(self, peer: str, entry: Any) -> TcpLink:
        return connect_tcp(entry[0], entry[1], self._end(peer))
