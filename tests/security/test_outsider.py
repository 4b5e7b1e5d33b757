"""An outsider who can reach the job's ports, but holds no secret, gets nothing and runs nothing.

A real two-worker job runs in OS processes; this test process plays the
outsider against each door: the rendezvous store (read the secret, squat a
rank), the gRPC server, the same-host socket and the TCP link between hosts
(call with a missing, empty or wrong secret; send a pickled payload). Every attempt must be refused
before anything is decoded, and the workers must keep serving each other.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import pathlib
import pickle
import socket
import stat
import threading
import time

import cloudpickle
import grpc
import pytest

from tensorplay_jax.rpc import _codec, _framing, _grpc, _local, _rendezvous, _tcp
from tensorplay_jax.rpc._link import Inbound
from tensorplay_jax.rpc._local import handshake
from tensorplay_jax.rpc._socket import ClientEnd
from tensorplay_jax.runtime import secret as _secret
from tests._procs import reported, run_workers
from tests.security import _rendezvous_workers as W

MARKER = "pwned"


class _Payload:
    """Unpickling this runs a shell command: what an attacker sends."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def _read_until_closed(sock: socket.socket, timeout: float = 15.0) -> bytes:
    """Everything the server sends before it closes the connection."""
    sock.settimeout(timeout)
    out = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return out
        if not chunk:
            return out
        out += chunk


def _probe_store(port: int, payload: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(payload)
        return _read_until_closed(s)


def _store_handshake(port: int, secret: str) -> bytes:
    """Run the store's challenge with ``secret``; return what the store sent after our answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        hello = s.recv(len(_rendezvous.MAGIC) + handshake._NONCE, socket.MSG_WAITALL)
        assert hello.startswith(_rendezvous.MAGIC)
        answer = _secret.mac(secret, b"client", hello[len(_rendezvous.MAGIC) :])
        name = b"rank 1"
        s.sendall(
            answer
            + os.urandom(handshake._NONCE)
            + len(name).to_bytes(2, "little")
            + name
            + b'{"op": "setnx", "k": "rank/1", "v": {}}\n'
        )
        return _read_until_closed(s)


def _grpc_call(address: str, metadata, body: _codec.Encoded) -> grpc.RpcError | None:
    stream = grpc.insecure_channel(address).stream_stream(_grpc.METHOD_PATH)
    ob = _framing.Outbox()
    ob.put(_codec.dumps_small([1, 1, {}]), body.header, body.buffers)
    try:
        for _ in stream(iter([next(ob.packets())]), metadata=metadata, timeout=10):
            pass
    except grpc.RpcError as e:
        return e
    return None


def _local_probe(address: str, data: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect("\0" + address)
        s.sendall(data)
        return _read_until_closed(s)


def _tcp_probe(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        return _read_until_closed(s)


def _evil_end(secret: str) -> ClientEnd:
    """An outsider's end of a connection to w1, proving ``secret``; it reads nothing."""
    quiet = Inbound(
        on_message=lambda *a: None, on_malformed=lambda *a: None, on_closed=lambda *a: None
    )
    return ClientEnd(peer="w1", me="evil", secret=secret, inbound=quiet)


@pytest.mark.parametrize("transport", ["local", "tcp", "grpc"])
def test_outsider_is_refused_at_every_door(tmp_path, port, transport):
    cfg = tmp_path / "cfg"  # the per-user secret file of this same-host job lives here
    env = {
        "TPJ_TMP": str(tmp_path),
        "XDG_CONFIG_HOME": str(cfg),
        "TENSORPLAY_JAX_RPC_LOCAL": "1" if transport == "local" else "0",
        "TENSORPLAY_JAX_RPC_TCP": "0" if transport == "grpc" else "1",
        # The store's probes below last until it gives up on their handshake: this long.
        "TPJ_STORE_AUTH_TIMEOUT": "3",
    }
    for k in (_secret.SECRET_ENV, _secret.SECRET_FILE_ENV, _secret.INSECURE_ENV):
        assert k not in os.environ, f"run this test without {k} set"
    results: list = []
    job = threading.Thread(
        target=lambda: results.append(
            run_workers(
                W.outsider_target_job, 2, timeout=150, env=env, master_port=port, check=False
            )
        )
    )
    job.start()
    marker = tmp_path / MARKER
    pickled = pickle.dumps(_Payload(str(marker)))
    try:
        # --- the store, while rank 0 waits for rank 1 in the rendezvous
        greeting_len = len(_rendezvous.MAGIC) + handshake._NONCE
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                    s.recv(greeting_len, socket.MSG_WAITALL)
                break
            except OSError:
                assert time.monotonic() < deadline, "rank 0's store never came up"
                time.sleep(0.1)
        old_wait = json.dumps({"op": "wait", "keys": {"secret": 0}, "timeout": 1}).encode() + b"\n"
        squat = json.dumps({"op": "setnx", "k": "rank/1", "v": {"name": "evil"}}).encode() + b"\n"
        attempts = (b"", old_wait, squat, pickled, b"\n" * 48)
        # Each probe lasts until the store gives up on its handshake: run them at once.
        with concurrent.futures.ThreadPoolExecutor(len(attempts)) as pool:
            replies = list(pool.map(lambda a: _probe_store(port, a), attempts))
        for attempt, got in zip(attempts, replies, strict=True):
            # Only the greeting (a magic and a random nonce) comes back: no JSON, no secret.
            assert got.startswith(_rendezvous.MAGIC) and len(got) == greeting_len, (attempt, got)
        for wrong in ("wrong", "", "x" * 64):
            assert _store_handshake(port, wrong) == b"", "the store answered a wrong secret"
        idle = socket.create_connection(("127.0.0.1", port), timeout=10)  # says nothing, stays
        (tmp_path / "store-probed").write_text("1")

        # --- the workers' servers
        for r in (0, 1):
            W._wait_for(tmp_path / f"addr{r}", timeout=90)
        addr = json.loads((tmp_path / "addr1").read_text())
        by_value = _codec.encode([lambda: os.system(f"touch {marker}"), [], {}])
        for md in [(), (("tpj-secret", ""),), (("tpj-secret", "wrong"),)]:
            err = _grpc_call(addr["grpc"], md, by_value)
            assert err is not None and err.code() == grpc.StatusCode.UNAUTHENTICATED, err
        if transport == "local":
            assert addr["local"], "the same-host server is not up"
            for data in (pickled, b"\0" * 4096, handshake._MAGIC + b"\0" * 64):
                got = _local_probe(addr["local"], data)
                assert (
                    got.startswith(handshake._MAGIC)
                    and len(got) == len(handshake._MAGIC) + handshake._NONCE
                ), got
            for wrong in ("wrong", "", "x" * 64):
                with pytest.raises((ConnectionError, OSError)):
                    _local.connect_local(addr["local"], _evil_end(wrong))
        if transport == "tcp":  # the TCP link between hosts: the same challenge first
            assert addr["tcp"], "the TCP server is not up"
            for data in (pickled, b"\0" * 4096, _tcp._MAGIC + b"\0" * 64):
                got = _tcp_probe(addr["tcp"], data)
                assert (
                    got.startswith(_tcp._MAGIC) and len(got) == len(_tcp._MAGIC) + handshake._NONCE
                ), got
            for wrong in ("wrong", "", "x" * 64):
                with pytest.raises((ConnectionError, OSError)):
                    _tcp.connect_tcp("127.0.0.1", addr["tcp"], _evil_end(wrong))
        idle.close()
    finally:
        (tmp_path / "outsider-done").write_text("1")
        job.join(timeout=180)
    assert not job.is_alive()
    res = results[0]
    for r in res:
        assert r.returncode == 0, r
        assert reported(r) == {"rpc_sync": r.rank + 10, "remote": 5}, r
    # Nothing the outsider sent ran, and rank 1 was not squatted.
    assert not marker.exists(), "an outsider's payload ran"
    assert "already taken" not in res[1].stderr
    # The same-host job's secret is the per-user file: owner-only, created on first use.
    path = cfg / "tensorplay_jax" / "rpc_secret"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    # The refusals were logged by the workers.
    assert "refused a connection" in res[0].stderr, res[0].stderr[-2000:]


def test_the_store_never_holds_the_secret(tmp_path, port, monkeypatch):
    """An authenticated client finds no secret in the store (it never travels through it)."""
    monkeypatch.setenv(_secret.SECRET_ENV, "s3cret-for-this-test")
    srv = _rendezvous.StoreServer("127.0.0.1", port, "s3cret-for-this-test")
    try:
        cli = _rendezvous.StoreClient("127.0.0.1", port, -1, 10, "s3cret-for-this-test")
        with pytest.raises(TimeoutError, match="did not arrive"):
            cli.wait({"secret": 0}, 0.2)
        cli.close()
        with pytest.raises(PermissionError, match="refused this worker's job secret"):
            _rendezvous.StoreClient("127.0.0.1", port, 1, 10, "another-secret")
    finally:
        srv.close()


def test_a_fake_store_is_not_believed(port):
    """A worker refuses a store that cannot prove the secret (it would hand out fake addresses)."""
    lsock = socket.create_server(("127.0.0.1", port))

    def fake() -> None:
        conn, _ = lsock.accept()
        with conn:
            conn.sendall(_rendezvous.MAGIC + os.urandom(handshake._NONCE))
            conn.recv(32 + handshake._NONCE, socket.MSG_WAITALL)
            conn.sendall(os.urandom(32))  # a proof made without the secret
            time.sleep(1)

    t = threading.Thread(target=fake, daemon=True)
    t.start()
    try:
        with pytest.raises(PermissionError, match="does not hold this job's secret"):
            _rendezvous.StoreClient("127.0.0.1", port, 1, 10, "s3cret")
    finally:
        t.join(5)
        lsock.close()


def test_unpickling_the_payload_would_run_it(tmp_path):
    """The payload the outsider sends is live: the refusals above are what stopped it."""
    marker = tmp_path / MARKER
    pickle.loads(pickle.dumps(_Payload(str(marker))))
    assert marker.exists()
    marker.unlink()
    cloudpickle.loads(cloudpickle.dumps(lambda: os.system(f"touch {marker}")))()
    assert pathlib.Path(marker).exists()
