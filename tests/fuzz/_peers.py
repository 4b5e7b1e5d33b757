"""Authenticated raw peers of a serving worker, for the fuzzers and the protocol-error tests.

Each holds one real connection (a Unix socket, a TCP socket, a gRPC stream) to
a worker of a running job, authenticated with the job secret, and writes what
it sends by hand: frames (``local``, ``tcp``) or packets (``grpc``). What the
worker sends back is kept as ``(envelope, header)`` pairs in ``replies``;
``closed`` is set once the worker ended the connection.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

from tensorplay_jax.rpc import _agent, _codec, _framing, _protocol
from tensorplay_jax.rpc._link import Inbound
from tensorplay_jax.rpc._local import frames
from tensorplay_jax.rpc._socket import ClientEnd
from tests.rpc import _targets

WAIT_S = 10.0
ME = "fuzzer"  # the peers' worker name, as the worker sees them


def secret() -> str:
    """The job secret, as this process's agent holds it."""
    agent = _agent.current_agent()
    for _, transport in agent.connections.transports:
        return transport._site.secret
    raise AssertionError("no transport")


def call_message(mid: int, a: int = 1, b: int = 2) -> tuple[bytes, bytes]:
    """A well-formed call of ``add(a, b)`` with message id ``mid``: (envelope, header)."""
    body = _codec.encode((_targets.add, (a, b), {}))
    assert not body.buffers
    return _codec.dumps_small([_protocol.CALL, mid, {}]), bytes(body.header)


def frame(kind: int, body: bytes, length: int | None = None) -> bytes:
    """A socket frame: ``u64 length`` (that of ``body`` unless given), ``u8 kind``, body."""
    return frames._FRAME.pack(len(body) if length is None else length, kind) + body


def inline(env: bytes, header: bytes) -> bytes:
    """An ``INLINE`` frame of one message without buffers."""
    return frame(frames._INLINE, b"".join(_framing.pack_message(env, header, [])))


def small_packet(env: bytes, header: bytes) -> bytes:
    """A gRPC ``SMALL`` packet of one message without buffers."""
    return b"\x01" + _framing._serialise_small(env, header, [])


class RawPeer:
    """One authenticated connection to worker ``to`` over ``transport``, written by hand."""

    def __init__(self, transport: str, entry: Any) -> None:
        self.transport = transport
        self.replies: queue.Queue[tuple[bytes, bytes]] = queue.Queue()
        self.closed = threading.Event()
        self.reason = ""
        cb = {
            "on_message": lambda link, m: self.replies.put((bytes(m.envelope), bytes(m.header))),
            "on_malformed": lambda link, e: None,
            "on_closed": self._on_closed,
        }
        kw = {"peer": "victim", "secret": secret(), "me": ME}
        if transport == "local":
            from tensorplay_jax.rpc import _local

            self.link = _local.connect_local(entry, ClientEnd(**kw, inbound=Inbound(**cb)))
        elif transport == "tcp":
            from tensorplay_jax.rpc import _tcp

            host, _, port = entry.rpartition(":")
            self.link = _tcp.connect_tcp(host, int(port), ClientEnd(**kw, inbound=Inbound(**cb)))
        else:
            self.link = _GrpcStream(entry, kw, cb)

    def _on_closed(self, link: Any, reason: str) -> None:
        self.reason = reason
        self.closed.set()

    def send_raw(self, data: bytes) -> None:
        """Send ``data`` as it is: frame bytes on a socket, one packet on a gRPC stream."""
        if self.transport == "grpc":
            self.link.packets.put(data)
        else:
            self.link._sock.sendall(data)

    def send_call(self, mid: int, a: int = 1, b: int = 2) -> None:
        env, header = call_message(mid, a, b)
        grpc = self.transport == "grpc"
        self.send_raw(small_packet(env, header) if grpc else inline(env, header))

    def outcome(
        self, mid: int, timeout: float = WAIT_S, *, errors_first: bool = False
    ) -> tuple[list[str], Any]:
        """What came back until the answer to call ``mid`` (and, with ``errors_first``, an
        error too: the worker's pool may answer calls out of order) or the close: the
        errors (their text), and the call's result (None if the worker closed first)."""
        errors: list[str] = []
        value: Any = None
        answered = False
        end = time.monotonic() + timeout
        while True:
            if answered and (errors or not errors_first):
                return errors, value
            left = end - time.monotonic()
            if left <= 0:
                raise AssertionError(
                    f"neither the answer to call {mid} nor a close within {timeout} s; "
                    f"errors so far: {errors}"
                )
            try:
                env, header = self.replies.get(timeout=min(left, 0.05))
            except queue.Empty:
                if self.closed.is_set() and self.replies.empty():
                    return errors, value
                continue
            kind, got_mid = _codec.loads_small(env)[:2]
            got = _codec.decode(header, [])
            if kind == _protocol.ERR:
                errors.append(str(_codec.rebuild_exception(got)))
            if got_mid == mid and kind == _protocol.OK:
                answered, value = True, got

    def close(self) -> None:
        self.link.close()


class _GrpcStream:
    """A gRPC stream whose request packets go out exactly as given (no ``Outbox``); what
    comes back is read with an ``Inbox`` and reported to the callbacks ``cb``."""

    def __init__(self, target: str, kw: dict[str, str], cb: dict[str, Any]) -> None:
        import grpc

        from tensorplay_jax.rpc import _grpc

        self.packets: queue.Queue[bytes | None] = queue.Queue()
        self._channel = grpc.insecure_channel(target, options=_grpc._OPTIONS)
        md = _grpc.auth_metadata(kw["secret"], kw["me"], target)
        self._call = self._channel.stream_stream(_grpc.METHOD_PATH)(self._requests(), metadata=md)
        self._cb = cb
        threading.Thread(target=self._read, daemon=True).start()

    def _requests(self) -> Any:
        while (p := self.packets.get()) is not None:
            yield p

    def _read(self) -> None:
        import grpc

        inbox = _framing.Inbox()
        reason = "stream closed"
        try:
            for packet in self._call:
                for m in inbox.feed(packet):
                    self._cb["on_message"](self, m)
        except grpc.RpcError as e:
            reason = f"{e.code()}: {e.details()}"
        except _framing.FramingError as e:
            reason = f"the worker sent a malformed packet: {e}"
        self._cb["on_closed"](self, reason)

    def close(self) -> None:
        self.packets.put(None)
        self._call.cancel()
        self._channel.close()
