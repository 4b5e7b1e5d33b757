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
import itertools
import logging
import mmap
import secrets
import socket
import sys
import threading
import weakref
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from tensorplay_jax.rpc import _tcp_lanes
from tensorplay_jax.rpc._framing import _PRELUDE, Message, StreamError, pack_message, unpack_message
from tensorplay_jax.rpc._link import Inbound
from tensorplay_jax.rpc._socket import ClientEnd
from tensorplay_jax.rpc._socket.frames import _FRAME, _INLINE, _READ_BYTES, _Reader
from tensorplay_jax.rpc._socket.link import _NOSIGNAL, SocketLink
from tensorplay_jax.rpc._socket.server import SocketServer, SocketTransport, start_reading
from tensorplay_jax.rpc._transport import Site
from tensorplay_jax.runtime import handshake

__all__ = ["TcpLink", "TcpServer", "TcpTransport", "connect_tcp"]

log = logging.getLogger(__name__)

_MAGIC = b"TPJTCP01"
_LANE, _STRIPED, _PART, _STRIPE = (
    _tcp_lanes._LANE,
    _tcp_lanes._STRIPED,
    _tcp_lanes._PART,
    _tcp_lanes._STRIPE,
)
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


class _Slot(NamedTuple):
    """Where a lane's part of a striped body goes: ``view``, at ``offset`` into ``m``."""

    view: memoryview
    m: mmap.mmap
    offset: int
    ready: bool  # the mapping's pages are already in (pooled)


def _fill(sock: socket.socket, m: mmap.mmap, ready: bool, pad: int, view: memoryview,
          have: int, stop: int) -> int:  # fmt: skip
    """Receive ``view[have:stop]`` (``view`` starts ``pad`` bytes into ``m``) a step at a time,
    faulting the fresh pages of each step in first; the byte count received."""
    start0 = have
    while have < stop:
        end = min(stop, have + _STEP)
        if not ready and _MADV_POPULATE_WRITE is not None:
            start = pad + have - (pad + have) % mmap.PAGESIZE
            with contextlib.suppress(OSError):  # only advice: the copy faults pages in
                m.madvise(_MADV_POPULATE_WRITE, start, pad + end - start)
        got = sock.recv_into(view[have:end], end - have, _WAITALL)
        if not got:
            raise EOFError("stream closed")
        have += got
    return have - start0


class _TcpReader(_Reader):
    """Frames off a TCP socket; a long body goes into a (pooled) mapping, read a step at a
    time with ``MSG_WAITALL``; its arrays sit on that mapping, which returns to the pool
    once none is left. A striped body's parts after the first arrive on the link's lanes
    (``_tcp_lanes``), a lane's reader filling the slice the primary's reader gives it."""

    def __init__(self, sock: socket.socket, peer: str, link: TcpLink) -> None:
        super().__init__(sock, peer)
        self._link = link

    def _large(self, n: int, kind: int) -> Any:  # type: ignore[override]
        if kind == _PART:
            return self._part(n)
        lanes = 1
        if kind == _STRIPED:
            self._need(_STRIPE.size)
            (lanes,) = _STRIPE.unpack_from(self._buf, self._lo)
            self._lo += _STRIPE.size
            if lanes < 2 or lanes != self._link.stripes.count:
                have = self._link.stripes.count
                raise StreamError(f"a STRIPED frame over {lanes} lanes, on a link of {have or 1}")
        have = self._hi - self._lo  # < n: the read buffer is shorter than a long body
        pad = 0
        if have >= _PRELUDE.size:  # start the body so that its first buffer is 64-byte aligned
            env_len, hdr_len, nbufs = _PRELUDE.unpack_from(self._buf, self._lo)
            pad = -(_PRELUDE.size + 8 * nbufs + env_len + hdr_len) % 64
        bounds = _tcp_lanes.cuts(n, lanes)
        if min(b - a for a, b in itertools.pairwise(bounds)) <= _READ_BYTES:
            raise StreamError(f"a STRIPED frame of {n} bytes over {lanes} lanes: parts too short")
        m, ready = _take(n + pad)
        base = np.frombuffer(m, np.uint8, count=n, offset=pad)
        view = memoryview(base)
        done = None
        if lanes > 1:
            stripes = self._link.stripes
            done = stripes.post(
                [_Slot(view[a:b], m, pad + a, ready) for a, b in itertools.pairwise(bounds[1:])]
            )
        view[:have] = self._buf[self._lo : self._hi]
        self._lo = self._hi = 0
        self._got += _fill(self._sock, m, ready, pad, view, have, bounds[1])
        if done is not None:
            self._link.stripes.wait(done)
        weakref.finalize(base, _give, m)
        return view

    def _part(self, n: int) -> None:
        """Receive a ``PART`` frame's body into the slice its primary's reader posted."""
        stripes = self._link.stripes_of
        if stripes is None:
            raise StreamError("a PART frame on a connection that is not a lane")
        sl, done = stripes.take(self._link.lane_index)
        if sl.view.nbytes != n:
            raise StreamError(f"a PART frame of {n} bytes for a part of {sl.view.nbytes}")
        have = self._hi - self._lo
        sl.view[:have] = self._buf[self._lo : self._hi]
        self._lo = self._hi = 0
        self._got += _fill(self._sock, sl.m, sl.ready, sl.offset, sl.view, have, n)
        stripes.filled(done)


def _tune(sock: socket.socket) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class TcpLink(SocketLink):
    """A ``SocketLink`` on a TCP socket: every message inline, buffers sent where they lie;
    a long message striped over the link's lanes once they are up (``_tcp_lanes``).

    Attributes:
      stripes: this link's lanes, as the primary connection of a link.
      stripes_of: the primary's lanes this connection is one of (None: not a lane).
      lane_index: this connection's index among its link's (0: the primary).
    """

    _reader_type = _TcpReader
    _kind = "tcp"

    def __init__(self, sock: socket.socket, peer: str, max_threads: int = 17) -> None:
        super().__init__(sock, peer, max_threads)
        self.stripes = _tcp_lanes.Stripes(self)
        self.stripes_of: _tcp_lanes.Stripes | None = None
        self.lane_index = 0
        self._registry: _tcp_lanes.Registry | None = None  # the server's, on an accepted link
        self._hello = False  # a LANE frame was read here

    def _new_reader(self) -> _Reader:
        return _TcpReader(self._sock, self.peer, self)

    def send(self, env: bytes, header: bytes, buffers: Sequence[Any] = ()) -> None:
        """Send one message (thread-safe, never blocks for long); dropped once the link is dead."""
        if not self.alive:
            return
        parts = pack_message(env, header, [_flat(b) for b in buffers])
        size = sum(len(p) if isinstance(p, bytes) else p.nbytes for p in parts)
        if size <= _JOIN_BYTES:
            self._write(b"".join([_FRAME.pack(size, _INLINE), *parts]), -1)
        elif size >= _tcp_lanes.STRIPE_MIN and self.stripes.tx:
            self._send_striped(parts, size, self.stripes.tx)
        else:
            first = b"".join([_FRAME.pack(size, _INLINE), *parts[:3]])
            self._write(_Parts([memoryview(first), *parts[3:]]), -1)  # type: ignore[arg-type]

    def _send_striped(self, parts: list[Any], size: int, lanes: list[TcpLink]) -> None:
        """Send part 0 of a long message here and part ``i`` on lane ``i`` (see ``_tcp_lanes``)."""
        bounds = _tcp_lanes.cuts(size, len(lanes) + 1)
        views = [memoryview(p) for p in parts]
        with self.stripes.send_lock:  # every lane carries its parts in this link's order
            head = _FRAME.pack(size, _STRIPED) + _STRIPE.pack(len(lanes) + 1)
            self._write(_Parts([memoryview(head), *_tcp_lanes.slices(views, 0, bounds[1])]), -1)
            for lane, (a, b) in zip(lanes, itertools.pairwise(bounds[1:]), strict=True):
                part = _tcp_lanes.slices(views, a, b)
                lane._write(_Parts([memoryview(_FRAME.pack(b - a, _PART)), *part]), -1)

    def _message(self, kind: int, body: Any, fd: int) -> Message | None:
        if kind == _STRIPED and not isinstance(body, bytes):
            return unpack_message(memoryview(body))
        if kind == _PART and body is None:
            return None  # a lane's part: its primary's reader has the message
        if kind == _LANE:
            self._lane_hello(body)
            return None
        if kind in (_STRIPED, _PART):
            raise StreamError(f"a frame of kind {kind} of {len(body)} bytes: too short to split")
        return super()._message(kind, body, fd)

    def _lane_hello(self, body: bytes) -> None:
        """A client's ``LANE`` frame: this connection is its link's primary or one of its lanes.

        Raises:
          StreamError: a second hello, a hello to a client, or one for no link held here.
          ConnectionError: the server stopped before the lane's link was read.
        """
        token, index, lanes = _tcp_lanes.read_hello(body)
        if self._hello or self._registry is None:
            raise StreamError("a LANE frame on a link that has one already, or to a client")
        self._hello = True
        if index == 0:
            self.stripes.count = lanes
            self._registry.add(token, self)
            return
        primary = self._registry.find(token, handshake.HANDSHAKE_TIMEOUT_S)
        primary.stripes.attach(index, self, lanes)

    def _drop_locked(self) -> None:
        # A link and its lanes end together (sockets shut down: no other link's lock taken).
        if self.stripes_of is not None:
            primary = self.stripes_of.primary
            if primary is not None:
                _tcp_lanes.shut(primary._sock)
            self.stripes_of.wake()
            return
        for lane in self.stripes.end():
            _tcp_lanes.shut(lane._sock)
        if self._registry is not None:
            self._registry.drop(self)

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
    _registry: _tcp_lanes.Registry

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
        self._registry = _tcp_lanes.Registry()
        super().__init__(sock, secret=secret, inbound=inbound, max_threads=max_threads, **callbacks)

    def _tune(self, conn: socket.socket) -> None:
        _tune(conn)

    def _new_link(self, conn: socket.socket, peer: str) -> TcpLink:
        link = TcpLink(conn, peer, self._max_threads)
        link._registry = self._registry
        return link

    def stop(self) -> None:
        """As :meth:`SocketServer.stop`; lanes still waiting for their link give up at once."""
        self._registry.close()
        super().stop()


def connect_tcp(host: str, port: int, end: ClientEnd, *, lanes: int | None = None) -> TcpLink:
    """Connect ``end`` to the ``TcpServer`` at ``host:port``, authenticate, and start reading
    replies.

    With ``lanes`` > 1 (None: ``TENSORPLAY_JAX_RPC_TCP_LANES``), the link's other
    connections are opened in the background (``_tcp_lanes``); until all are up, and
    if one cannot be opened, every message goes on this one.

    Raises:
      OSError: no server there, the connection timed out, or the handshake failed.
      ValueError: ``TENSORPLAY_JAX_RPC_TCP_LANES`` is not a lane count.
    """
    lanes = _tcp_lanes.lane_count() if lanes is None else lanes
    link = TcpLink(_connect(host, port, end.secret, end.me), end.peer, end.max_threads)
    start_reading(link, end.inbound)
    if lanes > 1:
        token = secrets.token_bytes(16)
        link.stripes.count = lanes
        link._write(_hello_frame(token, 0, lanes), -1)
        threading.Thread(
            target=_open_lanes,
            args=(link, (host, port, end.secret, end.me), token, lanes, end.inbound),
            name=f"tpj-rpc-tcp-lanes-{end.peer}",
            daemon=True,
        ).start()
    return link


def _connect(host: str, port: int, secret: str, me: str) -> socket.socket:
    """A connected, authenticated socket to the ``TcpServer`` at ``host:port``."""
    sock = socket.create_connection((host, port), timeout=handshake.HANDSHAKE_TIMEOUT_S)
    try:
        _tune(sock)
        handshake.authenticate(sock, secret.encode(), me, _MAGIC)
    except BaseException:
        sock.close()
        raise
    return sock


def _hello_frame(token: bytes, index: int, lanes: int) -> bytes:
    body = _tcp_lanes.hello(token, index, lanes)
    return _FRAME.pack(len(body), _LANE) + body


def _open_lanes(
    link: TcpLink, to: tuple[str, int, str, str], token: bytes, lanes: int, inbound: Inbound
) -> None:
    """Open ``link``'s lanes 1..``lanes - 1`` (a client's; in the background)."""
    quiet = inbound._replace(on_closed=lambda lane, reason: None)  # the primary reports
    for i in range(1, lanes):
        try:
            sock = _connect(*to)
        except OSError as e:
            log.debug("rpc: no lane %d to %s (%s): messages go on one connection", i, link.peer, e)
            return
        lane = TcpLink(sock, link.peer, 1)
        try:
            link.stripes.attach(i, lane, lanes)  # before the hello: its parts may come at once
        except ConnectionError:
            sock.close()
            return
        lane._write(_hello_frame(token, i, lanes), -1)
        start_reading(lane, quiet)


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
