"""Timeouts, killed peers, the job secret, malformed packets and TLS, over real processes."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.rpc import _transports as T
from tests.rpc import _workers as W


@pytest.mark.parametrize("transport", T.NAMES)
def test_timeouts_and_killed_peer(workers, transport):
    env = T.env_of(transport)
    res = workers(W.timeouts_and_kill, 3, timeout=120, check=False, env=env)
    assert res[2].returncode == -9, res[2]
    assert "FAULTS-OK" in res[0].stdout, res[0]
    for r in res[:2]:
        assert r.returncode == 0 and f"DONE {r.rank}" in r.stdout, r


def test_secret_checked_before_decoding_and_malformed_packets(workers, tmp_path, port):
    env = {"TPJ_TMP": str(tmp_path), "TPJ_STORE_PORT": str(port), "TENSORPLAY_JAX_RPC_SECRET": "s3"}
    res = workers(W.raw, 2, timeout=120, env=env)
    assert "SERVER-OK" in res[0].stdout and "CLIENT-OK" in res[1].stdout


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")
def test_tls_with_a_self_signed_certificate(workers, tmp_path):
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(tmp_path / "key.pem"), "-out", str(tmp_path / "cert.pem"),
         "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    res = workers(W.tls, 2, timeout=120, env={"TPJ_CERTS": str(tmp_path)})
    assert "TLS-OK" in res[0].stdout
