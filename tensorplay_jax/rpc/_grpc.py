"""The gRPC layer: one server per worker, one long-lived bidirectional stream per peer.

This is the only module that imports grpc. A worker opens one stream to each
peer it calls (``connect``); requests travel on the stream's request side and
replies come back on its response side. Every stream carries a credential in
its metadata, and the server checks it before it reads a single packet from
the stream, so nothing from an unauthenticated peer is ever decoded. The
credential proves the job secret without carrying it (:func:`auth_metadata`):
``HMAC(secret, target, caller, time, nonce)``, bound to the server's address,
fresh (within ``RPC_STREAM_AUTH_WINDOW_S`` of the server's clock) and used once
(the server remembers the nonces of that window), so someone who reads the
traffic of a stream without TLS can neither learn the secret nor replay the
credential to open another stream. Packets
are raw bytes (see ``_framing``); grpc's message size limits are lifted and
large messages are chunked anyway. TLS is optional (``TlsConfig``).

As a transport (``"grpc"``, :class:`GrpcTransport`, see ``rpc/transports``)
it is the one that carries TLS, and the last of the default list: peers on
the same host normally use ``_local`` and peers elsewhere ``_tcp``; this
stream is the one with TLS, and the fallback where those are off or a
connection through them fails.
"""

from __future__ import annotations

import hmac
import logging
import secrets
import threading
import time
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from tensorplay_jax.rpc._framing import FramingError, Inbox, Outbox
from tensorplay_jax.rpc._link import Inbound, LinkSet, inbound_of
from tensorplay_jax.rpc._transport import Site, TlsConfig
from tensorplay_jax.runtime.secret import mac
from tensorplay_jax.runtime.settings import RPC_STREAM_AUTH_WINDOW_S

__all__ = [
    "METHOD_PATH",
    "GrpcTransport",
    "Link",
    "Server",
    "auth_metadata",
    "connect",
]

log = logging.getLogger(__name__)

_SERVICE = "tensorplay_jax.rpc.Agent"
_METHOD = "Stream"
METHOD_PATH = f"/{_SERVICE}/{_METHOD}"  # the one stream method, for raw clients in tests
_AUTH_KEY = "tpj-auth"
_WORKER_KEY = "tpj-worker"
_AUTH_ROLE = b"grpc-stream\0"
_OPTIONS = [
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_send_message_length", -1),
    ("grpc.so_reuseport", 0),
    ("grpc.enable_retries", 0),
    ("grpc.use_local_subchannel_pool", 1),
    ("grpc.experimental.tcp_min_read_chunk_size", 256 << 10),
    ("grpc.experimental.tcp_max_read_chunk_size", 8 << 20),
]


def _proof(secret: bytes, target: str, me: str, stamp: str, nonce: str) -> str:
    return mac(secret, _AUTH_ROLE, "\0".join((target, me, stamp, nonce)).encode()).hex()


def auth_metadata(secret: str, me: str, target: str) -> tuple[tuple[str, str], ...]:
    """The metadata that opens a stream to ``target`` as ``me``: a fresh proof, not the secret.

    Example:
      >>> md = dict(auth_metadata("s3cret", "w0", "127.0.0.1:5000"))
      >>> md["tpj-worker"], "s3cret" in md["tpj-auth"], len(md["tpj-auth"].split())
      ('w0', False, 4)
    """
    stamp, nonce = str(int(time.time() * 1000)), secrets.token_hex(16)
    proof = _proof(secret.encode(), target, me, stamp, nonce)
    return ((_AUTH_KEY, f"v1 {stamp} {nonce} {proof}"), (_WORKER_KEY, me))


class _Refused(Exception):
    """A stream credential that does not check (the message goes back to the caller)."""


class _Credentials:
    """Checks stream credentials for one server; remembers each accepted nonce for the window."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret
        self.target: str | None = None  # the address peers reach this server by (set at start)
        self._seen: dict[str, float] = {}
        self._lock = threading.Lock()

    def check(self, md: dict[str, Any]) -> str:
        """Return the caller's worker name, or raise :class:`_Refused`."""
        raw = md.get(_AUTH_KEY, "")
        raw = raw.decode("ascii", "replace") if isinstance(raw, bytes) else str(raw)
        parts = raw.split(" ")
        me = str(md.get(_WORKER_KEY, ""))
        target = self.target
        if len(parts) != 4 or parts[0] != "v1" or target is None:
            raise _Refused("rpc: missing or wrong job secret")
        _, stamp, nonce, proof = parts
        if not hmac.compare_digest(proof, _proof(self._secret, target, me, stamp, nonce)):
            raise _Refused("rpc: missing or wrong job secret")
        try:
            skew = time.time() - int(stamp) / 1000
        except ValueError:
            raise _Refused("rpc: missing or wrong job secret") from None
        if abs(skew) > RPC_STREAM_AUTH_WINDOW_S:
            raise _Refused(
                f"rpc: the caller's clock is {skew:+.0f} s off this worker's (more than "
                f"{RPC_STREAM_AUTH_WINDOW_S:g} s); synchronise the hosts' clocks (NTP)"
            )
        now = time.monotonic()
        with self._lock:
            if nonce in self._seen:
                raise _Refused("rpc: a stream credential was replayed")
            if len(self._seen) > 1024:
                self._seen = {n: t for n, t in self._seen.items() if t > now}
            self._seen[nonce] = now + 2 * RPC_STREAM_AUTH_WINDOW_S
        return me


def _read(x: bytes | str | Path | None) -> bytes | None:
    if x is None or isinstance(x, bytes):
        return x
    return Path(x).read_bytes()


class Link:
    """One stream end (a ``_link.Link``): ``send`` queues; its ``Inbound`` gets what arrives."""

    def __init__(self, peer: str, outbox: Outbox) -> None:
        self.peer = peer
        self.outbox = outbox
        self.alive = True
        self.reason = ""
        self._call: Any = None

    def send(self, env: bytes, header: bytes, buffers: list[memoryview] | tuple = ()) -> None:
        self.outbox.put(env, header, buffers)

    def close(self, reason: str = "") -> None:
        self.reason = self.reason or reason
        self.alive = False
        self.outbox.close()
        if self._call is not None:
            self._call.cancel()

    def serves_inline(self) -> bool:
        """Never: the stream's reader only reads; the agent's pool serves the requests."""
        return False


def _pump(link: Link, packets: Any, inbound: Inbound, close_on_end: bool = True) -> None:
    on_message, on_malformed, on_closed = inbound
    inbox = Inbox()
    reason = "stream closed"
    try:
        for packet in packets:
            try:
                msgs = inbox.feed(packet)
            except FramingError as e:
                on_malformed(link, e)
                continue
            for m in msgs:
                on_message(link, m)
            # Hold no message (its buffers may be large) while waiting for the next packet.
            packet = msgs = m = None
    except grpc.RpcError as e:
        # grpc keeps the error it raised in the call's state, in a reference cycle; its
        # traceback would keep this frame (the last packet and message) alive until the
        # cyclic GC runs, long after the peer is gone.
        e.__traceback__ = None
        code = e.code() if hasattr(e, "code") else None
        details = e.details() if hasattr(e, "details") else str(e)
        reason = f"{code.name if code else 'UNKNOWN'}: {details}"
    except Exception as e:
        log.exception("rpc: reader for %s failed", link.peer)
        reason = f"{type(e).__name__}: {e}"
    else:
        if not close_on_end:
            # The peer half-closed: replies to what it sent may still be on their way;
            # the outbox closes when the call ends (grpc's termination callback).
            on_closed(link, link.reason or reason)
            return
    finally:
        inbox.close()  # the transfers the peer never finished, and the memory they hold
        link.reason = link.reason or reason
    link.alive = False
    link.outbox.close()
    on_closed(link, link.reason)


class Server:
    """The worker's grpc server; reads each authenticated incoming stream as a ``Link``.

    Takes the owner's ``inbound``, or its three callbacks by keyword
    (``on_message=``, ``on_malformed=``, ``on_closed=``).
    """

    def __init__(
        self,
        *,
        secret: str,
        max_streams: int,
        inbound: Inbound | None = None,
        tls: TlsConfig | None = None,
        **callbacks: Any,
    ) -> None:
        self._credentials = _Credentials(secret.encode())
        self._links = LinkSet(inbound_of(inbound, callbacks))
        self._tls = tls
        handler = grpc.method_handlers_generic_handler(
            _SERVICE, {_METHOD: grpc.stream_stream_rpc_method_handler(self._stream)}
        )
        self._server = grpc.server(
            futures.ThreadPoolExecutor(
                max_workers=max_streams, thread_name_prefix="tpj-rpc-stream"
            ),
            handlers=[handler],
            options=_OPTIONS,
        )

    def start(self, host: str, port: int) -> int:
        """Bind ``host:port`` (port 0 picks a free one), start serving, return the port."""
        addr = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if self._tls is None:
            bound = self._server.add_insecure_port(addr)
        else:
            creds = grpc.ssl_server_credentials(
                [(_read(self._tls.private_key), _read(self._tls.cert_chain))],
                root_certificates=_read(self._tls.root_certs)
                if self._tls.require_client_auth
                else None,
                require_client_auth=self._tls.require_client_auth,
            )
            bound = self._server.add_secure_port(addr, creds)
        if not bound:
            raise OSError(f"rpc: could not bind the gRPC server to {addr}")
        self._server.start()
        return bound

    def expect_target(self, address: str) -> None:
        """The address the other workers reach this server by (credentials are bound to it)."""
        self._credentials.target = address

    def stop(self, grace: float) -> None:
        for link in self._links.stop():
            link.outbox.close()
        self._server.stop(grace).wait(grace + 1.0)

    def _stream(self, request_iterator: Any, context: grpc.ServicerContext) -> Any:
        md = dict(context.invocation_metadata())
        try:
            peer = self._credentials.check(md)
        except _Refused as e:
            # Reject before reading (let alone decoding) anything the peer sent.
            log.warning("rpc: refused a gRPC stream from %s: %s", context.peer(), e)
            context.abort(grpc.StatusCode.UNAUTHENTICATED, str(e))
        link = Link(peer or context.peer(), Outbox())
        inbound = self._links.add(link)
        if inbound is None:  # stop() has run: end this stream as it ended the others
            context.abort(grpc.StatusCode.UNAVAILABLE, "rpc: this worker is shutting down")
        context.add_callback(link.outbox.close)
        threading.Thread(
            target=_pump,
            args=(link, request_iterator, inbound, False),
            name=f"tpj-rpc-serve-{link.peer}",
            daemon=True,
        ).start()
        return link.outbox.packets()


def connect(
    target: str,
    *,
    peer: str,
    secret: str,
    me: str,
    inbound: Inbound | None = None,
    tls: TlsConfig | None = None,
    **callbacks: Any,
) -> Link:
    """Open a stream to the server at ``target`` ("host:port") and start reading its replies.

    Takes the owner's ``inbound``, or its three callbacks by keyword.
    """
    inbound = inbound_of(inbound, callbacks)
    options = list(_OPTIONS)
    if tls is None:
        channel = grpc.insecure_channel(target, options=options)
    else:
        if tls.server_name:
            options.append(("grpc.ssl_target_name_override", tls.server_name))
        creds = grpc.ssl_channel_credentials(
            root_certificates=_read(tls.root_certs),
            private_key=_read(tls.private_key) if tls.require_client_auth else None,
            certificate_chain=_read(tls.cert_chain) if tls.require_client_auth else None,
        )
        channel = grpc.secure_channel(target, creds, options=options)
    link = Link(peer, Outbox())
    stub = channel.stream_stream(METHOD_PATH)
    call = stub(link.outbox.packets(), metadata=auth_metadata(secret, me, target))
    link._call = call

    def on_closed_and_release(link: Link, reason: str) -> None:
        try:
            inbound.on_closed(link, reason)
        finally:
            channel.close()

    threading.Thread(
        target=_pump,
        args=(link, call, inbound._replace(on_closed=on_closed_and_release)),
        name=f"tpj-rpc-link-{peer}",
        daemon=True,
    ).start()
    return link


def host_port(host: str, port: int) -> str:
    """``host:port``, with an IPv6 host in brackets (as gRPC targets are written).

    Example:
      >>> host_port("10.0.0.2", 5000), host_port("::1", 5000)
      ('10.0.0.2:5000', '[::1]:5000')
    """
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class GrpcTransport:
    """The gRPC stream as the agent holds it (``rpc/transports.Transport``).

    Serves on the listen address and ``port`` (0: any free one); advertises the
    ``host:port`` the peers reach it by (stream credentials are bound to it).
    """

    tls = True  # the one transport that carries TLS
    slow_connect = False  # a channel connects lazily: opening a stream does not wait

    def __init__(self) -> None:
        self.server: Server | None = None
        self.address = ""
        self._site: Site | None = None

    def serve(self, site: Site) -> bool:
        self._site = site
        self.server = Server(
            secret=site.secret,
            inbound=site.inbound,
            max_streams=site.max_streams,
            tls=site.tls,
        )
        bound = self.server.start(site.listen, site.port)
        self.address = host_port(site.advertise, bound)
        self.server.expect_target(self.address)
        return True

    def advertise(self) -> Any:
        return self.address

    def reaches(self, entry: Any) -> bool:
        return isinstance(entry, str) and bool(entry)

    def connect(self, peer: str, entry: Any) -> Link:
        site = self._site
        assert site is not None
        return connect(
            entry, peer=peer, secret=site.secret, me=site.me, inbound=site.inbound, tls=site.tls
        )

    def stop(self, grace: float = 0.0) -> None:
        if self.server is not None:
            self.server.stop(grace)
