"""RPC, distributed autograd, RemoteModule with the optimizer, and TLS across simulated hosts.

Each transport is checked per pair: the same-host socket between workers on one
host, the TCP link between hosts (TLS keeps everything on gRPC).
"""

from __future__ import annotations

import shutil
import subprocess

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from tests._procs import collected, reported, run_on_hosts
from tests._worker import OUT_DIR
from tests.multihost import _workers as W

HOST_LAYOUTS = {"1-per-host": [0, 1], "2-per-host": [0, 0, 1, 1]}


@pytest.fixture(scope="module", params=list(HOST_LAYOUTS))
def calls(request, cluster, tmp_path_factory) -> tuple[list[int], list[dict]]:
    """``(hosts, every rank's {peer: results})`` of one ``rpc_calls`` job."""
    hosts = HOST_LAYOUTS[request.param]
    out = tmp_path_factory.mktemp(f"rpc-{request.param}")
    res = run_on_hosts(cluster, W.rpc_calls, hosts, timeout=150, env={OUT_DIR: str(out)})
    return hosts, collected(out, res)


def _pairs(calls):
    hosts, got = calls
    for rank, per_peer in enumerate(got):
        assert sorted(per_peer) == [p for p in range(len(hosts)) if p != rank], rank
        for peer, seen in per_peer.items():
            yield rank, peer, seen


def test_rpc_reaches_the_peer_on_its_host(calls, cluster):
    hosts = calls[0]
    for _rank, peer, seen in _pairs(calls):
        assert seen["where"] == (peer, cluster.hosts[hosts[peer]]), (_rank, peer, seen["where"])


def test_rpc_sync_and_async_return_the_peers_results(calls):
    x = np.arange(6.0, dtype=np.float32)
    for rank, peer, seen in _pairs(calls):
        np.testing.assert_array_equal(seen["add"], x + peer, err_msg=f"{rank}->{peer}")
        for k, y in enumerate(seen["async"]):
            np.testing.assert_array_equal(y, x * k, err_msg=f"{rank}->{peer} async {k}")


def test_remote_rrefs_both_ways(calls):
    x = np.arange(6.0, dtype=np.float32)
    for rank, peer, seen in _pairs(calls):
        assert seen["rref_owner"] == f"w{peer}" and seen["rref_is_owner"] is False
        np.testing.assert_array_equal(seen["rref_value"], np.arange(peer + 3))
        assert seen["rref_sum"] == float((x + rank).sum()), (rank, peer)


def test_a_4_mib_argument_comes_back_intact(calls):
    for rank, peer, seen in _pairs(calls):
        np.testing.assert_array_equal(seen["echo"], W.big_payload(rank), err_msg=f"{rank}->{peer}")


def test_each_pair_uses_the_socket_on_a_host_and_tcp_between_hosts(calls):
    hosts = calls[0]
    links = {(rank, peer): seen["link"] for rank, peer, seen in _pairs(calls)}
    n = len(hosts)
    want = {
        (a, b): "socket" if hosts[a] == hosts[b] else "tcp"
        for a in range(n)
        for b in range(n)
        if a != b
    }
    assert links == want


@pytest.fixture(scope="module")
def trained(cluster) -> dict:
    """What rank 0 (host 0) got driving rank 1 (host 1): gradients, parameters."""
    return reported(run_on_hosts(cluster, W.autograd_and_optimizer, [0, 1], timeout=150)[0])


def test_the_driven_worker_is_on_another_host(trained):
    assert trained["hosts"][0] != trained["hosts"][1], trained["hosts"]


def test_dist_autograd_across_hosts_matches_jax_grad(trained):
    x0, w0 = np.random.default_rng(W.SEED).standard_normal((2, 5, 3)).astype(np.float32)
    want = jax.grad(lambda a, b: jnp.sum(jnp.tanh(a * b) ** 2), argnums=(0, 1))(x0, w0)
    for got, w in zip(trained["grads"], want, strict=True):
        np.testing.assert_allclose(np.asarray(got, np.float32), w, rtol=1e-5, atol=1e-6)


def test_distributed_optimizer_across_hosts_matches_optax(trained):
    rng = np.random.default_rng(W.SEED)
    rng.standard_normal((2, 5, 3))  # the autograd inputs come first
    batches = rng.standard_normal(W.BATCHES).astype(np.float32)
    start = [jnp.asarray(np.asarray(p, np.float32)) for p in trained["start"]]
    assert [p.shape for p in start] == [(3, 4), (3,)], [p.shape for p in start]

    def loss(params, xb):
        wt, b = params
        y = xb @ wt.T + b
        return jnp.sum(y * y)

    tx = optax.adam(0.05)
    params, state = start, tx.init(start)
    for xb in batches:
        updates, state = tx.update(jax.grad(loss)(params, xb), state, params)
        params = optax.apply_updates(params, updates)
    for got, want, s in zip(trained["trained"], params, start, strict=True):
        got = np.asarray(got, np.float32)
        np.testing.assert_allclose(got, np.asarray(want), rtol=1e-5, atol=1e-6)
        assert np.abs(got - np.asarray(s)).max() > 1e-3  # the steps moved it


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")
def test_tls_across_hosts(cluster, on_hosts, tmp_path):
    san = ",".join(f"IP:{a}" for a in cluster.addresses)
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(tmp_path / "key.pem"), "-out", str(tmp_path / "cert.pem"),
         "-subj", "/CN=tpj-multihost", "-addext", f"subjectAltName={san}"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    out = tmp_path / "out"
    out.mkdir()
    env = {"TPJ_CERTS": str(tmp_path), OUT_DIR: str(out)}
    got = collected(out, on_hosts(W.tls, [0, 1], timeout=150, env=env))
    x = np.arange(3 << 18, dtype=np.float32)
    for rank, seen in enumerate(got):
        peer = 1 - rank
        np.testing.assert_array_equal(seen["echo"], x, err_msg=f"rank {rank}")
        assert seen["remote_where"] == (peer, cluster.hosts[peer]), seen["remote_where"]
        assert seen["link"] == "grpc", (rank, seen["link"])
