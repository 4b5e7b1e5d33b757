"""``TCPStore``: a store served by one process (the master) to the others over TCP.

The master's ``TCPStore(host, port, world_size, is_master=True)`` starts a server
that holds the table (``_store._Table``: the semantics live there once); every
``TCPStore``, the master's included, is a client connection to it. Each connection
first proves the job secret (``runtime.handshake``, as every socket of a job here;
for a same-host job the per-user secret needs no setup), then sends requests one at
a time: a frame of ``[op, *args]`` (msgpack, length-prefixed), answered by
``[0, result]`` or ``[1, kind, message]``. The server runs one thread per
connection, so a ``get`` that waits for its key holds only its own connection.
A wait's limit travels with the request; the client gives the reply that long and
a little more, then raises ``DistNetworkError``, as it does when the connection
fails. The master's server stops with its ``TCPStore`` (or the process): requests
under way get their replies first, so a client whose last call the master applied
is not left without an answer.

Example:
  >>> import datetime
  >>> master = TCPStore("127.0.0.1", 0, 1, True, timeout=datetime.timedelta(seconds=10))
  >>> master.set("k", "v"); master.get("k"), master.port > 0
  (b'v', True)
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
import weakref
from typing import Any

import msgpack

from tensorplay_jax.process_group._errors import DistNetworkError, DistStoreError
from tensorplay_jax.process_group._store import QueueEmptyError, Store, _Table
from tensorplay_jax.runtime import handshake
from tensorplay_jax.runtime import secret as _secret

__all__ = ["TCPStore"]

MAGIC = b"TPJKVS01"
_LEN = struct.Struct("!I")
_MAX_FRAME = 1 << 30  # a request or reply larger than this is refused
_REPLY_GRACE_S = 10.0  # a reply may come this long after its request's own limit
_CONNECT_RETRY_S = 0.1
_CLOSE_GRACE_S = 2.0  # a closing master answers the requests under way this long
# What a client may ask: the table's operations, by name.
_OPS = frozenset(
    (
        "set",
        "get",
        "add",
        "compare_set",
        "append",
        "multi_get",
        "multi_set",
        "wait",
        "check",
        "delete_key",
        "num_keys",
        "queue_push",
        "queue_pop",
        "queue_len",
    )
)
_KINDS: dict[type, str] = {
    QueueEmptyError: "queue_empty",
    DistStoreError: "store",
    ValueError: "value",
    TypeError: "type",
}
_RAISE = {
    "queue_empty": QueueEmptyError,
    "store": DistStoreError,
    "value": ValueError,
    "type": TypeError,
}


def _send(sock: socket.socket, obj: Any) -> None:
    body = msgpack.packb(obj, use_bin_type=True)
    sock.sendall(_LEN.pack(len(body)) + body)


def _recv(sock: socket.socket) -> Any:
    (n,) = _LEN.unpack(handshake.recv_exact(sock, _LEN.size))
    if n > _MAX_FRAME:
        raise ConnectionError(f"a store frame of {n} bytes (at most {_MAX_FRAME})")
    return msgpack.unpackb(handshake.recv_exact(sock, n), raw=False)


class _Server:
    """The master's table, served on ``(host, port)`` to connections that hold the secret."""

    def __init__(self, host: str, port: int, secret: bytes) -> None:
        self.table = _Table()
        self._secret = secret
        try:
            self._listener = socket.create_server((host, port))
        except OSError as e:
            raise DistNetworkError(
                f"TCPStore: the master cannot listen on ({host}, {port}): {e}"
            ) from None
        self.port = self._listener.getsockname()[1]
        self._conns: set[socket.socket] = set()
        self._joined = threading.Condition()
        self.clients = 0
        self._busy = 0  # requests being answered
        self._closed = False
        threading.Thread(target=self._accept, name="tpj-tcpstore", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        if handshake.accept(conn, self._secret, MAGIC) is None:
            return  # closed by the handshake
        with self._joined:
            if self._closed:
                conn.close()
                return
            self._conns.add(conn)
            self.clients += 1
            self._joined.notify_all()
        try:
            while True:
                request = _recv(conn)
                with self._joined:
                    self._busy += 1
                try:
                    _send(conn, self._answer(request))
                finally:
                    with self._joined:
                        self._busy -= 1
                        self._joined.notify_all()
        except (OSError, ConnectionError, ValueError, msgpack.UnpackException):
            pass  # the client left, or sent what is not a request: its connection ends
        finally:
            with self._joined:
                self._conns.discard(conn)
            conn.close()

    def _answer(self, request: Any) -> list[Any]:
        if not isinstance(request, list) or not request or request[0] not in _OPS:
            return [1, "value", f"not a store request: {str(request)[:80]}"]
        try:
            return [0, getattr(self.table, request[0])(*request[1:])]
        except Exception as e:  # a bad request gets an error reply; the connection goes on
            kind = next((k for cls, k in _KINDS.items() if isinstance(e, cls)), None)
            if kind is None:
                return [1, "value", f"bad store request {request[0]!r}: {type(e).__name__}: {e}"]
            return [1, kind, str(e)]

    def wait_for_clients(self, world_size: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self._joined:
            while self.clients < world_size:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise DistStoreError(
                        f"Timed out after {timeout:g} seconds waiting for clients. "
                        f"{self.clients}/{world_size} clients joined."
                    )
                self._joined.wait(left)

    def close(self) -> None:
        """Stop serving: no new connection; a request being answered (one this process's
        exit would otherwise cut off after the table applied it) gets its reply first,
        within ``_CLOSE_GRACE_S``."""
        self._listener.close()
        deadline = time.monotonic() + _CLOSE_GRACE_S
        with self._joined:
            self._closed = True
            while self._busy and time.monotonic() < deadline:
                self._joined.wait(deadline - time.monotonic())
            conns = list(self._conns)
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)


class _Client:
    """One connection to a server; the table's operations, sent one at a time."""

    def __init__(self, host: str, port: int, secret: bytes, timeout: float) -> None:
        self._where = f"({host}, {port})"
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._sock = socket.create_connection((host, port), timeout=max(0.1, timeout))
                break
            except OSError as e:
                if time.monotonic() >= deadline:
                    raise DistNetworkError(
                        f"TCPStore: timed out after {round(timeout * 1000)}ms while trying to "
                        f"connect to {self._where} ({e}); is the master store running there?"
                    ) from None
                time.sleep(_CONNECT_RETRY_S)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            handshake.authenticate(self._sock, secret, "TCPStore", MAGIC)
        except handshake.WrongProtocol:
            self._sock.close()
            raise DistNetworkError(
                f"TCPStore: {self._where} is not a tensorplay_jax TCPStore (it did not greet)"
            ) from None
        except (handshake.SecretRefused, handshake.Impostor) as e:
            self._sock.close()
            raise PermissionError(
                f"TCPStore: the store at {self._where} and this process hold different job "
                f"secrets ({e}); every process of a job needs the same one "
                "(TENSORPLAY_JAX_RPC_SECRET or TENSORPLAY_JAX_RPC_SECRET_FILE, or the per-user "
                "file of a same-host job)"
            ) from None
        self._lock = threading.Lock()

    def _call(self, op: str, *args: Any, wait_s: float = 0.0) -> Any:
        with self._lock:
            try:
                self._sock.settimeout(wait_s + _REPLY_GRACE_S)
                _send(self._sock, [op, *args])
                reply = _recv(self._sock)
            except (OSError, ConnectionError) as e:
                raise DistNetworkError(f"TCPStore.{op}: the store at {self._where}: {e}") from None
        if reply[0] == 0:
            return reply[1]
        raise _RAISE.get(reply[1], DistStoreError)(reply[2])

    def __getattr__(self, op: str) -> Any:
        if op not in _OPS:
            raise AttributeError(op)
        if op in ("get", "multi_get", "wait"):
            return lambda keys, timeout: self._call(op, keys, timeout, wait_s=timeout)
        if op == "queue_pop":
            return lambda key, block, timeout: self._call(op, key, block, timeout, wait_s=timeout)
        return lambda *args: self._call(op, *args)

    def close(self) -> None:
        self._sock.close()


class TCPStore(Store):
    """A store that the master process serves over TCP (tensorplay's ``TCPStore``).

    Args:
      host_name: where the master serves (and the others connect).
      port: its port; 0 on the master picks a free one (read it from :attr:`port`).
      world_size: how many stores will connect, the master's included; the master
        waits for all of them when ``wait_for_workers`` (None: it does not wait).
      is_master: this process serves the store (it lives as long as this object).
      timeout: how long to connect, and the default wait of ``get``/``wait``
        (a ``timedelta`` or seconds; default 300 s).
      wait_for_workers: the master waits for ``world_size`` stores to connect.
      multi_tenant, master_listen_fd, use_libuv: accepted for tensorplay's signature.

    Raises:
      DistNetworkError: no store answered at ``(host_name, port)`` in time.
      DistStoreError: the master waited longer than ``timeout`` for the others.
      PermissionError: the store holds another job's secret.
    """

    def __init__(
        self,
        host_name: str,
        port: int,
        world_size: int | None = None,
        is_master: bool = False,
        timeout: Any = None,
        wait_for_workers: bool = True,
        multi_tenant: bool = False,
        master_listen_fd: int | None = None,
        use_libuv: bool = True,
    ) -> None:
        super().__init__(timeout)
        key = _secret.job_secret("TCPStore", given=None, rendezvous_host=host_name).encode()
        self._server = _Server(host_name, port, key) if is_master else None
        self.host = host_name
        self.port = self._server.port if self._server is not None else int(port)
        try:
            self._ops = _Client(host_name, self.port, key, self._timeout_s)
            if self._server is not None and wait_for_workers and world_size:
                self._server.wait_for_clients(int(world_size), self._timeout_s)
        except BaseException:
            if self._server is not None:
                self._server.close()
            raise
        weakref.finalize(self, _close, self._ops, self._server)

    @property
    def libuvBackend(self) -> bool:
        """False: the server is this package's own, not libuv's."""
        return False


def _close(client: _Client, server: _Server | None) -> None:
    client.close()
    if server is not None:
        server.close()
