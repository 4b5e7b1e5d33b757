"""RPC, distributed autograd, RemoteModule with the optimizer, and TLS across simulated hosts.

Each transport is checked per pair: the same-host socket between workers on one
host, the TCP link between hosts (TLS keeps everything on gRPC).
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

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


def test_dist_autograd_and_distributed_optimizer_across_hosts(on_hosts):
    hosts = [0, 1]
    res = on_hosts(W.autograd_and_optimizer, hosts, timeout=150)
    assert "AUTOGRAD-OK" in res[0].stdout, str(res[0])


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
