"""The job secret is checked before anything is decoded, malformed packets get errors, TLS.

The secret tests speak the gRPC wire format by hand to a world of one in the test
process (the transports' own modules build the packets: the one place this file
reaches into private modules). The TLS test joins a peer started for it.
"""

from __future__ import annotations

import shutil
import subprocess

import grpc
import numpy as np
import pytest

from tensorplay_jax import rpc
from tensorplay_jax.rpc import _agent, _codec, _framing, _grpc  # the wire, by hand
from tests._procs import free_port, reported
from tests.rpc import _targets as T
from tests.rpc import _workers as W
from tests.rpc._jobs import Peers

SECRET = "s3"


@pytest.fixture
def server(monkeypatch):
    """A world of one here, named ``server``, with the job secret ``SECRET``: its address."""
    monkeypatch.setenv("TENSORPLAY_JAX_RPC_SECRET", SECRET)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    rpc.init_rpc("server", rank=0, world_size=1)
    try:
        yield _agent.current_agent().address
    finally:
        rpc.shutdown()


def _request(mid: int, fn, *args) -> bytes:
    ob = _framing.Outbox()
    body = _codec.encode((fn, args, {}))
    ob.put(_codec.dumps_small([1, mid, {}]), body.header, body.buffers)
    return next(ob.packets())


def _replies(address: str, packets: list[bytes], metadata, n: int) -> list:
    """Send ``packets`` on one stream; the first ``n`` (envelope, value) replies."""
    stream = grpc.insecure_channel(address).stream_stream(_grpc.METHOD_PATH)
    inbox = _framing.Inbox()
    out = []
    for p in stream(iter(packets), metadata=metadata, timeout=20):
        for m in inbox.feed(p):
            env = _codec.loads_small(m.envelope)
            out.append((env, _codec.decode(bytes(m.header), m.buffers)))
        if len(out) == n:
            break
    return out


@pytest.mark.parametrize(
    "metadata",
    [(), (("tpj-secret", "wrong"),), (("tpj-secret", ""),)],
    ids=["none", "wrong", "empty"],
)
def test_a_call_without_the_secret_is_refused_before_it_runs(server, tmp_path, metadata):
    marker = tmp_path / "unauth-marker"
    with pytest.raises(grpc.RpcError) as e:
        _replies(server, [_request(1, T.touch, str(marker))], metadata, 1)
    assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED, e.value
    assert "secret" in e.value.details()
    assert not marker.exists(), "a call without the secret ran"
    assert rpc.rpc_sync("server", T.add, args=(1, 2)) == 3  # still serving


def test_malformed_packets_get_errors_and_the_valid_ones_run(server, tmp_path):
    marker = tmp_path / "auth-marker"
    good, valid = _request(2, T.touch, str(marker)), _request(3, T.add, 40, 2)
    garbage = [b"\x01\xff\xff\xff\xff", b"\x07junk", valid[:-3], b"\x01" + b"\0" * 12]
    md = _grpc.auth_metadata(SECRET, "raw", server)
    out = _replies(server, [*garbage, good, valid], md, 6)
    errs = [val for env, val in out if env[0] == 17]
    oks = {env[1]: val for env, val in out if env[0] == 16}
    assert len(errs) == 4 and all("malformed" in val[2] for val in errs), out
    assert oks == {2: str(marker), 3: 42}, out
    assert marker.read_text() == "ran"
    assert rpc.rpc_sync("server", T.add, args=(1, 2)) == 3  # still serving


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")
def test_tls_with_a_self_signed_certificate(tmp_path):
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(tmp_path / "key.pem"), "-out", str(tmp_path / "cert.pem"),
         "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    tls = W.tls_options(str(tmp_path))
    with Peers(W.tls_peer, 2, env={"TPJ_CERTS": str(tmp_path)}) as peers:
        rpc.init_rpc("w0", rank=0, world_size=2, rpc_backend_options=peers.options(**tls))
        try:
            x = np.arange(3 << 18, dtype=np.float32)  # large enough to be chunked
            np.testing.assert_array_equal(rpc.rpc_sync("w1", T.identity, args=(x,)), x)
            assert rpc.remote("w1", T.add, args=(1, 2)).to_here() == 3
            peer = _agent.current_agent().peers.address(1)
            stream = grpc.insecure_channel(peer).stream_stream(_grpc.METHOD_PATH)
            with pytest.raises(grpc.RpcError) as e:  # plaintext cannot talk to a TLS server
                next(iter(stream(iter([b"\x01"]), timeout=5)))
            codes = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
            assert e.value.code() in codes, e.value
        finally:
            rpc.shutdown()
    assert reported(peers.results[0])["warnings"] == []
