"""Timeouts, killed peers, the job secret, malformed packets and TLS, over real processes."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.rpc._scripts import script

TIMEOUTS_AND_KILL = script(
    """
    opts = rpc.GrpcRpcBackendOptions(rpc_timeout=1.5)
    rpc.init_rpc(f"w{rank}", rank=rank, world_size=ws, rpc_backend_options=opts)
    if rank == 0:
        t = time.monotonic()
        e = expect(TimeoutError,
                   ["RPC ran for more than 0.5 seconds", "'w1'", "tests.rpc._targets.sleep"],
                   rpc.rpc_sync, "w1", T.sleep, args=(5,), timeout=0.5)
        assert isinstance(e, rpc.RpcTimeoutError) and time.monotonic() - t < 3
        expect(TimeoutError, ["RPC ran for more than 1.5 seconds"],
               rpc.rpc_async("w1", T.sleep, args=(5,)).wait)  # the default from the options
        slow = rpc.remote("w1", T.sleep, args=(5,), timeout=0.5)
        time.sleep(0.8)
        expect(TimeoutError, ["RPC ran for more than 0.5 seconds", "remote"], slow.to_here)
        assert rpc.rpc_sync("w1", T.add, args=(1, 1), timeout=0) == 2  # no limit, still serving
        # kill w2 while a call to it is running: the call fails fast and names the peer
        pending = rpc.rpc_async("w2", T.sleep, args=(30,), timeout=20)
        rpc.rpc_sync("w2", T.die_soon, args=(0.3,))
        t = time.monotonic()
        expect(rpc.RpcPeerError, ["'w2'", "lost the connection"], pending.wait)
        assert time.monotonic() - t < 5, time.monotonic() - t
        e = expect(Exception, ["w2"], rpc.rpc_sync, "w2", T.add, args=(1, 1), timeout=3)
        assert time.monotonic() - t < 8
        assert rpc.rpc_sync("w1", T.add, args=(2, 2)) == 4  # the others keep serving
        print("FAULTS-OK")
    if rank == 2:
        time.sleep(60)  # killed by die_soon
    rpc.shutdown()
    print("DONE", rank)
    """
)


@pytest.mark.parametrize("transport", ["local", "grpc"])
def test_timeouts_and_killed_peer(workers, transport):
    env = {"TENSORPLAY_JAX_RPC_LOCAL": "1" if transport == "local" else "0"}
    res = workers(TIMEOUTS_AND_KILL, 3, timeout=120, check=False, env=env)
    assert res[2].returncode == -9, res[2]
    assert "FAULTS-OK" in res[0].stdout, res[0]
    for r in res[:2]:
        assert r.returncode == 0 and f"DONE {r.rank}" in r.stdout, r


RAW = script(
    """
    import pathlib, grpc
    from tensorplay_jax.rpc import _codec, _framing, _service
    tmp = pathlib.Path(os.environ["TPJ_TMP"])
    if rank == 0:  # the RPC worker (a world of one, on its own store port)
        os.environ.update(MASTER_PORT=os.environ["TPJ_STORE_PORT"], WORLD_SIZE="1")
        rpc.init_rpc("server", rank=0, world_size=1)
        from tensorplay_jax.rpc import _agent
        (tmp / "addr.tmp").write_text(_agent.current_agent().address)
        (tmp / "addr.tmp").rename(tmp / "addr")
        wait_until(lambda: (tmp / "client-done").exists(), timeout=60)
        assert not (tmp / "unauth-marker").exists(), "a call without the secret ran"
        assert (tmp / "auth-marker").read_text() == "ran"
        assert rpc.rpc_sync("server", T.add, args=(1, 2)) == 3  # still serving
        rpc.shutdown()
        print("SERVER-OK")
    else:  # a raw gRPC client speaking the wire format by hand
        wait_until(lambda: (tmp / "addr").exists(), timeout=60)
        channel = grpc.insecure_channel((tmp / "addr").read_text())
        stream = channel.stream_stream(_service.METHOD_PATH)

        def request(mid, fn, *args):
            ob = _framing.Outbox()
            body = _codec.encode((fn, args, {}))
            ob.put(_codec.dumps_small([1, mid, {}]), body.header, body.buffers)
            return next(ob.packets())

        def replies(packets, metadata, n):
            inbox = _framing.Inbox()
            out = []
            for p in stream(iter(packets), metadata=metadata, timeout=20):
                for m in inbox.feed(p):
                    env = _codec.loads_small(m.envelope)
                    out.append((env, _codec.decode(bytes(m.header), m.buffers)))
                if len(out) == n:
                    break
            return out

        unauth = request(1, T.touch, str(tmp / "unauth-marker"))
        for md in [(), (("tpj-secret", "wrong"),), (("tpj-secret", ""),)]:
            try:
                replies([unauth], md, 1)
                raise AssertionError("no error without the secret")
            except grpc.RpcError as e:
                assert e.code() == grpc.StatusCode.UNAUTHENTICATED, e
                assert "secret" in e.details()
        good = request(2, T.touch, str(tmp / "auth-marker"))
        valid = request(3, T.add, 40, 2)
        garbage = [b"\\x01\\xff\\xff\\xff\\xff", b"\\x07junk", valid[:-3], b"\\x01" + b"\\0" * 12]
        secret = os.environ["TENSORPLAY_JAX_RPC_SECRET"]
        md = _service.auth_metadata(secret, "raw", (tmp / "addr").read_text())
        out = replies([garbage[0], garbage[1], garbage[2], garbage[3], good, valid], md, 6)
        errs = [(env, val) for env, val in out if env[0] == 17]
        oks = {env[1]: val for env, val in out if env[0] == 16}
        assert len(errs) == 4 and all("malformed" in val[2] for _, val in errs), out
        assert oks == {2: str(tmp / "auth-marker"), 3: 42}, out
        (tmp / "client-done").write_text("1")
        print("CLIENT-OK")
    """
)


def test_secret_checked_before_decoding_and_malformed_packets(workers, tmp_path, port):
    env = {"TPJ_TMP": str(tmp_path), "TPJ_STORE_PORT": str(port), "TENSORPLAY_JAX_RPC_SECRET": "s3"}
    res = workers(RAW, 2, timeout=120, env=env)
    assert "SERVER-OK" in res[0].stdout and "CLIENT-OK" in res[1].stdout


TLS = script(
    """
    d = os.environ["TPJ_CERTS"]
    opts = rpc.GrpcRpcBackendOptions(
        tls_cert_chain=f"{d}/cert.pem", tls_private_key=f"{d}/key.pem",
        tls_root_certs=f"{d}/cert.pem",
        tls_require_client_auth=True,
    )
    rpc.init_rpc(f"w{rank}", rank=rank, world_size=ws, rpc_backend_options=opts)
    if rank == 0:
        x = np.arange(3 << 18, dtype=np.float32)  # large enough to be chunked
        assert (rpc.rpc_sync("w1", T.identity, args=(x,)) == x).all()
        assert rpc.remote("w1", T.add, args=(1, 2)).to_here() == 3
        import grpc
        from tensorplay_jax.rpc import _agent, _service
        peer = _agent.current_agent()._addresses[1]
        stream = grpc.insecure_channel(peer).stream_stream(_service.METHOD_PATH)
        try:  # a plaintext client cannot talk to a TLS server
            next(iter(stream(iter([b"\\x01"]), timeout=5)))
            raise AssertionError("plaintext reached a TLS server")
        except grpc.RpcError as e:
            assert e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED), e
        print("TLS-OK")
    rpc.shutdown()
    """
)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")
def test_tls_with_a_self_signed_certificate(workers, tmp_path):
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(tmp_path / "key.pem"), "-out", str(tmp_path / "cert.pem"),
         "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    res = workers(TLS, 2, timeout=120, env={"TPJ_CERTS": str(tmp_path)})
    assert "TLS-OK" in res[0].stdout
