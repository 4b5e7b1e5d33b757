"""Rendezvous store: the store that rank 0 hosts, where RPC workers find each other.

Where it listens (``env://`` or ``tcp://``, RANK and WORLD_SIZE, SLURM) is
``tensorplay_jax.runtime.init_method``.

The store is a small line-oriented JSON protocol over TCP, served by rank 0 on
MASTER_ADDR:MASTER_PORT for the life of the RPC session. A request it cannot
read gets ``{"err": ...}`` naming what is wrong, and the connection reads on
(a line past ``RPC_STORE_MAX_LINE`` gets the error, then the connection closes). It holds worker
names and addresses and the shutdown barrier; never the job secret. A
connection that closes without saying goodbye marks its rank dead, so
barriers never wait for a killed worker.

Every connection first runs the job's mutual challenge (``runtime.handshake``,
magic ``MAGIC``), before the store reads a single request: the store sends the
magic and a random nonce, the client answers with an HMAC of it under the job
secret (``tensorplay_jax.runtime.secret``), its own nonce and its rank; a wrong
answer closes the connection (nothing was decoded); the store then proves the
secret back, so a worker never takes addresses from a store that is not its job's.

When rank 0 gives up waiting (a rank never came), it first tells every waiting
rank which ranks were missing (:meth:`StoreServer.abort`), so each one reports
the real cause rather than "the store closed".
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import socketserver
import threading
import time
from typing import Any

from tensorplay_jax.rpc import _group_store
from tensorplay_jax.runtime import handshake
from tensorplay_jax.runtime.settings import (
    RPC_STORE_ABORT_GRACE_S,
    RPC_STORE_AUTH_TIMEOUT_S,
    RPC_STORE_CONNECT_RETRY_S,
    RPC_STORE_MAX_LINE,
    RPC_STORE_POLL_S,
)

__all__ = ["StoreAborted", "StoreClient", "StoreServer"]

log = logging.getLogger(__name__)

MAGIC = b"TPJSTR02"


class StoreAborted(ConnectionError):
    """Rank 0 gave up on the rendezvous; the message says why (e.g. the missing ranks)."""


class StoreTimeout(TimeoutError):
    """A store wait ran out of time; ``missing`` lists the ranks that never set their key."""

    def __init__(self, message: str, missing: list[int]) -> None:
        super().__init__(message)
        self.missing = missing


class _State:
    def __init__(self, secret: str) -> None:
        self.secret = secret.encode()
        self.data: dict[str, Any] = {}
        self.dead: set[int] = set()
        self.cond = threading.Condition()
        self.aborted: str | None = None  # rank 0 gave up: the reason every waiter gets
        self.waiting = 0  # requests blocked in wait / wait_count
        self.group = _group_store.GroupState()  # a dynamic group's members (``_group_store``)


def _request(line: bytes) -> dict[str, Any]:
    """One store request: a JSON object whose ``op`` is a string.

    Raises:
      ValueError: anything else (the store answers with an error and reads on).

    Example:
      >>> _request(b'{"op": "set", "k": "a", "v": 1}')["op"]
      'set'
      >>> _request(b'[1, 2]')
      Traceback (most recent call last):
      ...
      ValueError: a store request is a JSON object with a string "op", not list
    """
    req = json.loads(line)
    if not isinstance(req, dict) or not isinstance(req.get("op"), str):
        raise ValueError(
            f'a store request is a JSON object with a string "op", not {type(req).__name__}'
        )
    return req


class _Handler(socketserver.StreamRequestHandler):
    server: _TCPServer
    member: tuple[str, str] | None = None  # (name, nonce) of the dynamic member it joined

    def handle(self) -> None:
        st = self.server.state
        rank: int | None = None
        clean = False
        try:
            # The handshake closes a connection that fails it (and logs a wrong secret).
            if handshake.accept(self.request, st.secret, MAGIC, RPC_STORE_AUTH_TIMEOUT_S) is None:
                return
            while True:
                line = self.rfile.readline(RPC_STORE_MAX_LINE)
                if not line:
                    break
                if not line.endswith(b"\n"):
                    # The rest of the line is unread: nothing after it can be told apart.
                    self._reply({"err": "store request longer than RPC_STORE_MAX_LINE"})
                    break
                try:
                    req = _request(line)
                    op = req["op"]
                    if op == "bye":
                        clean = True
                        self._reply({"ok": True})
                        break
                    if op == "hello":
                        rank = int(req["rank"])
                        self._reply({"ok": True})
                        continue
                    if op in _group_store.GROUP_OPS:
                        with st.cond:
                            reply = _group_store.group_op(st, self, op, req)
                    else:
                        reply = self._op(st, op, req)
                except (
                    ValueError,
                    KeyError,
                    TypeError,
                    AttributeError,
                    ArithmeticError,
                    RecursionError,
                ) as e:
                    reply = {"err": f"malformed store request ({type(e).__name__}: {e})"}
                self._reply(reply)
        except OSError:
            pass
        finally:
            _group_store.closed(st, self)
            if rank is not None and not clean:
                with st.cond:
                    st.dead.add(rank)
                    st.cond.notify_all()

    def _reply(self, obj: Any) -> None:
        try:
            line = json.dumps(obj).encode()
        except (ValueError, TypeError, RecursionError) as e:  # e.g. an int past JSON's digits
            line = json.dumps({"err": f"cannot send the reply ({type(e).__name__}: {e})"}).encode()
        self.wfile.write(line + b"\n")
        self.wfile.flush()

    @staticmethod
    def _op(st: _State, op: str, req: dict[str, Any]) -> dict[str, Any]:
        with st.cond:
            if op == "set":
                st.data[req["k"]] = req["v"]
                st.cond.notify_all()
                return {"ok": True}
            if op == "setnx":
                v = st.data.setdefault(req["k"], req["v"])
                st.cond.notify_all()
                return {"v": v}
            if op == "add":
                v = st.data.get(req["k"], 0) + req["v"]
                st.data[req["k"]] = v
                st.cond.notify_all()
                return {"v": v}
            if op == "wait":
                # keys: {key: rank}; done when every key is set or its rank is dead.
                keys: dict[str, int] = req["keys"]
                # No timeout (none, null or 0): wait for as long as it takes.
                timeout = _group_store.seconds(req) if req.get("timeout") is not None else 0
                deadline = time.monotonic() + timeout if timeout else None

                def ready() -> bool:
                    return all(k in st.data or r in st.dead for k, r in keys.items())

                while not ready():
                    left = None if deadline is None else deadline - time.monotonic()
                    missing = sorted(
                        r for k, r in keys.items() if k not in st.data and r not in st.dead
                    )
                    if st.aborted is not None:
                        return {"err": "aborted", "why": st.aborted, "missing": missing}
                    if left is not None and left <= 0:
                        return {"err": "timeout", "missing": missing}
                    st.waiting += 1
                    try:
                        st.cond.wait(left)
                    finally:
                        st.waiting -= 1
                return {
                    "v": {k: st.data[k] for k in keys if k in st.data},
                    "dead": sorted(st.dead),
                }
            if op == "wait_count":
                deadline = time.monotonic() + _group_store.seconds(req)
                while st.data.get(req["k"], 0) < req["n"] - len(st.dead):
                    left = deadline - time.monotonic()
                    if left <= 0 or st.aborted is not None:
                        return {"err": "timeout"}
                    st.waiting += 1
                    try:
                        st.cond.wait(left)
                    finally:
                        st.waiting -= 1
                return {"ok": True}
        return {"err": f"unknown op {op!r}"}


class _TCPServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    state: _State


class StoreServer:
    """The store on rank 0; serves connections that prove ``secret`` until :meth:`close`.

    ``mode`` (``"static"``: a fixed-size group, ``"dynamic"``) is the group's from
    the start, so a worker of the other kind is refused whenever it comes.
    """

    def __init__(self, host: str, port: int, secret: str, mode: str | None = None) -> None:
        try:
            self._srv = _TCPServer((host, port), _Handler)
        except OSError as e:
            raise OSError(
                f"init_rpc: rank 0 could not host the rendezvous store on {host}:{port} ({e}); "
                "pick a free MASTER_PORT"
            ) from e
        self._srv.state = _State(secret)
        self._srv.state.group.mode = mode
        self._thread = threading.Thread(
            target=self._srv.serve_forever,
            args=(RPC_STORE_POLL_S,),  # how soon close() is noticed
            name="tpj-rpc-store",
            daemon=True,
        )
        self._thread.start()

    def abort(self, why: str) -> None:
        """Fail every pending and later wait with ``why``; give the waiters a moment to hear it."""
        st = self._srv.state
        with st.cond:
            st.aborted = why
            st.cond.notify_all()
            deadline = time.monotonic() + RPC_STORE_ABORT_GRACE_S
            while st.waiting and time.monotonic() < deadline:
                st.cond.wait(0.01)
        time.sleep(0.05)  # the replies are written just after the waiters wake

    def close(self) -> None:
        self._srv.shutdown()
        self._srv.server_close()


def _connect(host: str, port: int) -> socket.socket:
    """A TCP connection to ``host:port``, never one to itself.

    With nothing listening on a port of the ephemeral range, a loopback connect
    can be given that same port as its own source port and connect to itself (TCP
    simultaneous open): a silent peer, not a store. That counts as refused.
    """
    sock = socket.create_connection((host, port), timeout=5.0)
    if sock.getsockname() == sock.getpeername():
        sock.close()
        raise ConnectionRefusedError(f"nothing listens on {host}:{port} (connected to itself)")
    return sock


class StoreClient:
    """A connection to the store (thread-safe; one request at a time)."""

    # Seconds each request waits for its reply (None: for ever); shutdown bounds it. One
    # that runs out raises ConnectionError, and the connection reads nothing more.
    reply_timeout: float | None = None

    def __init__(self, host: str, port: int, rank: int, timeout: float, secret: str) -> None:
        self.rank = rank
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while True:
            try:
                self._sock = _connect(host, port)
                break
            except OSError as e:
                last = e
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"init_rpc: could not reach the rendezvous store at {host}:{port} within "
                        f"{timeout:g} s ({last}); is rank 0 running with the same MASTER_ADDR/"
                        "MASTER_PORT?"
                    ) from None
                time.sleep(RPC_STORE_CONNECT_RETRY_S)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._r = self._sock.makefile("rb")
        self._lock = threading.Lock()
        self._where = f"{host}:{port}"
        try:
            self._authenticate(secret, rank)
        except BaseException:
            self._r.close()
            self._sock.close()
            raise
        self._sock.settimeout(None)
        self._call({"op": "hello", "rank": rank})

    def _authenticate(self, secret: str, rank: int) -> None:
        try:
            handshake.authenticate(
                self._sock, secret.encode(), f"rank {rank}", MAGIC, RPC_STORE_AUTH_TIMEOUT_S
            )
        except handshake.WrongProtocol:
            raise ConnectionError(
                f"init_rpc: {self._where} is not a tensorplay_jax rendezvous store (it did not "
                "greet); check MASTER_ADDR/MASTER_PORT"
            ) from None
        except handshake.SecretRefused:
            raise PermissionError(
                f"init_rpc: the rendezvous store at {self._where} refused this worker's job "
                "secret; every worker of a job needs the same secret (TENSORPLAY_JAX_RPC_SECRET "
                "or TENSORPLAY_JAX_RPC_SECRET_FILE, or the per-user file of a same-host job)"
            ) from None
        except handshake.Impostor:
            raise PermissionError(
                f"init_rpc: the rendezvous store at {self._where} does not hold this job's "
                "secret; refusing to take addresses from it"
            ) from None

    def _call(self, req: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            try:
                self._sock.settimeout(self.reply_timeout)
                self._sock.sendall(json.dumps(req).encode() + b"\n")
                line = self._r.readline()
            except OSError as e:
                raise ConnectionError(
                    f"rpc: lost the rendezvous store at {self._where}: {e}"
                ) from e
        if not line:
            raise ConnectionError(
                f"rpc: the rendezvous store at {self._where} closed (rank 0 gone?)"
            )
        return json.loads(line)

    def set(self, key: str, value: Any) -> None:
        self._call({"op": "set", "k": key, "v": value})

    def setnx(self, key: str, value: Any) -> Any:
        """Set ``key`` unless it exists; return the stored value."""
        return self._call({"op": "setnx", "k": key, "v": value})["v"]

    def add(self, key: str, n: int) -> int:
        return self._call({"op": "add", "k": key, "v": n})["v"]

    def wait(self, keys: dict[str, int], timeout: float | None) -> tuple[dict[str, Any], list[int]]:
        """Wait until each key is set (or its rank, the value, died); return (values, dead ranks).

        Raises:
          TimeoutError: naming the ranks that never set their key.
        """
        rep = self._call({"op": "wait", "keys": keys, "timeout": timeout})
        if rep.get("err") == "timeout":
            missing = rep["missing"]
            raise StoreTimeout(f"ranks {missing} did not arrive within {timeout:g} s", missing)
        if rep.get("err") == "aborted":
            raise StoreAborted(f"ranks {rep['missing']} did not arrive; {rep['why']}")
        return rep["v"], rep["dead"]

    def all_gather(self, key: str, value: Any, world_size: int, timeout: float) -> list[Any]:
        """Publish ``value`` as this rank's ``key``; every rank's value, in rank order.

        A rank that published and then exited (it may have failed on what it gathered)
        still counts: its value is here.

        Raises:
          TimeoutError: a rank did not publish within ``timeout`` seconds.
          ConnectionError: a rank exited before it published.
        """
        self.setnx(f"{key}/{self.rank}", value)
        got, _ = self.wait({f"{key}/{r}": r for r in range(world_size)}, timeout)
        gone = [r for r in range(world_size) if f"{key}/{r}" not in got]
        if gone:
            raise ConnectionError(f"init_rpc: ranks {gone} exited during the rendezvous ({key})")
        return [got[f"{key}/{r}"] for r in range(world_size)]

    def group(self, op: str, **req: Any) -> dict[str, Any]:
        """A dynamic group request (``_group_store``: join, leave, watch, mode); its reply."""
        return self._call({"op": op, **req})

    def wait_count(self, key: str, n: int, timeout: float) -> bool:
        return "err" not in self._call({"op": "wait_count", "k": key, "n": n, "timeout": timeout})

    def interrupt(self) -> None:
        """End a request blocked on this connection (from another thread); the connection ends."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)

    def close(self, clean: bool = True) -> None:
        """Leave; without ``clean`` the store counts this rank as dead (barriers stop waiting)."""
        if clean:
            with contextlib.suppress(ConnectionError, ValueError):
                self._call({"op": "bye"})
        self._r.close()
        self._sock.close()
