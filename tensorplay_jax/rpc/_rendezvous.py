"""Rendezvous: how workers find each other (env:// or tcp://), and the store that rank 0 hosts.

The store is a small line-oriented JSON protocol over TCP, served by rank 0 on
MASTER_ADDR:MASTER_PORT for the life of the RPC session. It holds worker
names and addresses, the job secret when rank 0 generated it, and the
shutdown barrier. A connection that closes without saying goodbye marks its
rank dead, so barriers never wait for a killed worker.

Environment: ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT`` (and
SLURM's ``SLURM_PROCID``, ``SLURM_NTASKS``, ``SLURM_JOB_NODELIST`` when those
are missing).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import socketserver
import threading
import time
from typing import Any
from urllib.parse import urlparse

from tensorplay_jax._constants import RPC_STORE_CONNECT_RETRY_S

__all__ = ["StoreClient", "StoreServer", "resolve_init", "slurm_env"]


def _first_slurm_host(nodelist: str) -> str:
    """First host of a SLURM node list: ``"n[01-04],m"`` -> ``"n01"``."""
    m = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if not m:
        return nodelist
    prefix, ranges = m.group(1), m.group(2)
    if not ranges:
        return prefix
    return prefix + ranges.split(",")[0].split("-")[0]


def slurm_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT derived from SLURM's variables (if any).

    Example:
      >>> slurm_env({"SLURM_PROCID": "3", "SLURM_NTASKS": "8", "SLURM_JOB_NODELIST": "gpu[07-08]",
      ...            "SLURM_JOB_ID": "1234"})["MASTER_ADDR"]
      'gpu07'
    """
    env = os.environ if environ is None else environ
    out: dict[str, str] = {}
    if "SLURM_PROCID" in env:
        out["RANK"] = env["SLURM_PROCID"]
    if "SLURM_NTASKS" in env:
        out["WORLD_SIZE"] = env["SLURM_NTASKS"]
    if "SLURM_LOCALID" in env:
        out["LOCAL_RANK"] = env["SLURM_LOCALID"]
    nodes = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if nodes:
        out["MASTER_ADDR"] = _first_slurm_host(nodes)
    if "SLURM_JOB_ID" in env:
        out["MASTER_PORT"] = str(20000 + int(env["SLURM_JOB_ID"]) % 20000)
    return out


def _env(name: str) -> str | None:
    v = os.environ.get(name)
    return v if v else slurm_env().get(name)


def _free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def resolve_init(init_method: str, rank: int, world_size: int | None) -> tuple[str, int, int, int]:
    """Return (store host, store port, rank, world_size) from the init method and environment."""
    if rank is None or rank < 0:
        r = _env("RANK")
        if r is None:
            raise ValueError("init_rpc: rank was not given and RANK is not set in the environment")
        rank = int(r)
    if world_size is None:
        w = _env("WORLD_SIZE")
        if w is None:
            raise ValueError(
                "init_rpc: world_size was not given and WORLD_SIZE is not set in the environment"
            )
        world_size = int(w)
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"init_rpc: rank={rank} is not in [0, world_size={world_size})")
    if init_method.startswith("env://"):
        host, port = _env("MASTER_ADDR"), _env("MASTER_PORT")
        if world_size == 1 and not (host or port):
            # A single worker (a notebook, a quick test) needs no shared address: rendezvous
            # with itself on a free loopback port.
            return "127.0.0.1", _free_loopback_port(), rank, world_size
        if not host or not port:
            raise ValueError(
                "init_rpc: init_method='env://' needs MASTER_ADDR and MASTER_PORT in the "
                "environment "
                "(or use init_method='tcp://host:port')"
            )
        return host, int(port), rank, world_size
    if init_method.startswith("tcp://"):
        u = urlparse(init_method)
        if not u.hostname or not u.port:
            raise ValueError(
                f"init_rpc: init_method={init_method!r} must look like 'tcp://host:port'"
            )
        return u.hostname, u.port, rank, world_size
    raise ValueError(
        f"init_rpc: init_method={init_method!r} is not supported; use 'env://' or 'tcp://host:port'"
    )


class _State:
    def __init__(self) -> None:
        self.data: dict[str, Any] = {}
        self.dead: set[int] = set()
        self.cond = threading.Condition()


class _Handler(socketserver.StreamRequestHandler):
    server: _TCPServer

    def handle(self) -> None:
        st = self.server.state
        rank: int | None = None
        clean = False
        try:
            for line in self.rfile:
                req = json.loads(line)
                op = req["op"]
                if op == "bye":
                    clean = True
                    self._reply({"ok": True})
                    break
                if op == "hello":
                    rank = int(req["rank"])
                    self._reply({"ok": True})
                    continue
                self._reply(self._op(st, op, req))
        except (OSError, ValueError, KeyError):
            pass
        finally:
            if rank is not None and not clean:
                with st.cond:
                    st.dead.add(rank)
                    st.cond.notify_all()

    def _reply(self, obj: Any) -> None:
        self.wfile.write(json.dumps(obj).encode() + b"\n")
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
                deadline = time.monotonic() + req["timeout"] if req.get("timeout") else None

                def ready() -> bool:
                    return all(k in st.data or r in st.dead for k, r in keys.items())

                while not ready():
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        missing = sorted(r for k, r in keys.items() if k not in st.data)
                        return {"err": "timeout", "missing": missing}
                    st.cond.wait(left)
                return {
                    "v": {k: st.data[k] for k in keys if k in st.data},
                    "dead": sorted(st.dead),
                }
            if op == "wait_count":
                deadline = time.monotonic() + req["timeout"]
                while st.data.get(req["k"], 0) < req["n"] - len(st.dead):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return {"err": "timeout"}
                    st.cond.wait(left)
                return {"ok": True}
        return {"err": f"unknown op {op!r}"}


class _TCPServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    state: _State


class StoreServer:
    """The store on rank 0; serves until :meth:`close`."""

    def __init__(self, host: str, port: int) -> None:
        try:
            self._srv = _TCPServer((host, port), _Handler)
        except OSError as e:
            raise OSError(
                f"init_rpc: rank 0 could not host the rendezvous store on {host}:{port} ({e}); "
                "pick a free MASTER_PORT"
            ) from e
        self._srv.state = _State()
        self._thread = threading.Thread(
            target=self._srv.serve_forever, name="tpj-rpc-store", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self._srv.shutdown()
        self._srv.server_close()


class StoreClient:
    """A connection to the store (thread-safe; one request at a time)."""

    def __init__(self, host: str, port: int, rank: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while True:
            try:
                self._sock = socket.create_connection((host, port), timeout=5.0)
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
        self._sock.settimeout(None)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._r = self._sock.makefile("rb")
        self._lock = threading.Lock()
        self._where = f"{host}:{port}"
        self._call({"op": "hello", "rank": rank})

    def _call(self, req: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            try:
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
            raise TimeoutError(f"ranks {rep['missing']} did not arrive within {timeout:g} s")
        return rep["v"], rep["dead"]

    def wait_count(self, key: str, n: int, timeout: float) -> bool:
        return "err" not in self._call({"op": "wait_count", "k": key, "n": n, "timeout": timeout})

    def close(self, clean: bool = True) -> None:
        """Leave; without ``clean`` the store counts this rank as dead (barriers stop waiting)."""
        if clean:
            with contextlib.suppress(ConnectionError, ValueError):
                self._call({"op": "bye"})
        self._r.close()
        self._sock.close()
