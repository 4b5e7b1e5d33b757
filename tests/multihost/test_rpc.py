"""RPC, distributed autograd, RemoteModule with the optimizer, and TLS across simulated hosts.

Each transport is checked per pair: the same-host socket between workers on one
host, the TCP link between hosts (TLS keeps everything on gRPC).
"""

from __future__ import annotations

import re
import shutil
import subprocess

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from tests._procs import reported, run_on_hosts
from tests.multihost import _workers as W


def _links(results) -> dict[tuple[int, int], str]:
    out = {}
    for r in results:
        for a, b, kind in re.findall(r"^LINK (\d+)->(\d+) (\w+)$", r.stdout, re.M):
            out[int(a), int(b)] = kind
    return out


@pytest.mark.parametrize("hosts", [[0, 1], [0, 0, 1, 1]], ids=["1-per-host", "2-per-host"])
def test_rpc_between_hosts(on_hosts, hosts):
    res = on_hosts(W.rpc_calls, hosts, timeout=150)
    n = len(hosts)
    for r in res:
        assert f"RPC-OK {r.rank}" in r.stdout, str(r)
    want = {
        (a, b): "socket" if hosts[a] == hosts[b] else "tcp"
        for a in range(n)
        for b in range(n)
        if a != b
    }
    assert _links(res) == want


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
    hosts = [0, 1]
    res = on_hosts(W.tls, hosts, timeout=150, env={"TPJ_CERTS": str(tmp_path)})
    for r in res:
        assert f"TLS-OK {r.rank}" in r.stdout, str(r)
    assert _links(res) == {(0, 1): "grpc", (1, 0): "grpc"}
