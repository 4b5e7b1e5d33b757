"""Where the job secret comes from: never the store, never empty, never silently absent."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tensorplay_jax.distributed import rpc
from tensorplay_jax.runtime import secret as _secret
from tests._procs import REPO_ROOT, handed_back, reported
from tests._worker import OUT_DIR
from tests.security import _rendezvous_workers as W

_SECRET_VARS = (_secret.SECRET_ENV, _secret.SECRET_FILE_ENV, _secret.INSECURE_ENV)


@pytest.fixture
def no_secret_env(monkeypatch, tmp_path):
    for k in _SECRET_VARS:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))


def test_empty_secret_is_an_error_not_no_authentication(no_secret_env, monkeypatch, port):
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    monkeypatch.setenv(_secret.SECRET_ENV, "")
    with pytest.raises(ValueError, match="TENSORPLAY_JAX_RPC_SECRET: the job secret is empty"):
        rpc.init_rpc("solo", rank=0, world_size=1)
    assert not rpc.is_initialized()
    monkeypatch.delenv(_secret.SECRET_ENV)
    opts = rpc.GrpcRpcBackendOptions(secret="   ")
    with pytest.raises(ValueError, match="the job secret is empty"):
        rpc.init_rpc("solo", rank=0, world_size=1, rpc_backend_options=opts)


def test_multi_host_job_without_a_secret_refuses_and_names_the_ways(no_secret_env, monkeypatch):
    # 198.18.0.1 is never contacted: the secret is resolved before any connection.
    monkeypatch.setenv("MASTER_ADDR", "198.18.0.1")
    monkeypatch.setenv("MASTER_PORT", "29999")
    with pytest.raises(ValueError) as e:
        rpc.init_rpc("w1", rank=1, world_size=2)
    for s in ("not loopback", "TENSORPLAY_JAX_RPC_SECRET", "TENSORPLAY_JAX_RPC_SECRET_FILE",
              "GrpcRpcBackendOptions(secret=...)", "TENSORPLAY_JAX_RPC_INSECURE=1"):  # fmt: skip
        assert s in str(e.value), (s, str(e.value))
    assert not rpc.is_initialized()


def test_secret_file_must_be_owner_only(no_secret_env, tmp_path, monkeypatch):
    f = tmp_path / "job.secret"
    f.write_text("file-secret\n")
    f.chmod(0o644)
    monkeypatch.setenv(_secret.SECRET_FILE_ENV, str(f))
    with pytest.raises(PermissionError, match="chmod 600"):
        _secret.job_secret("init_rpc", given=None, rendezvous_host="198.18.0.1")
    f.chmod(0o600)
    assert _secret.job_secret("init_rpc", given=None, rendezvous_host="198.18.0.1") == "file-secret"
    f.write_text("\n")
    with pytest.raises(ValueError, match="empty"):
        _secret.job_secret("init_rpc", given=None, rendezvous_host="198.18.0.1")
    monkeypatch.setenv(_secret.SECRET_FILE_ENV, str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match="cannot read the secret file"):
        _secret.job_secret("init_rpc", given=None, rendezvous_host="127.0.0.1")


def test_a_job_runs_on_a_secret_file(workers, tmp_path):
    f = tmp_path / "job.secret"
    f.write_text(_secret.new_secret())
    f.chmod(0o600)
    res = workers(W.two_workers_ping, 2, timeout=120, env={_secret.SECRET_FILE_ENV: str(f)})
    assert [reported(r) for r in res] == [{"reply": 1}, {"reply": 2}]


def test_workers_with_different_secrets_do_not_form_a_job(workers, tmp_path):
    # Rank 1 hears the refusal when rank 0's store stops, at rank 0's init timeout: the job
    # lasts that long, so it is short here (long enough for both to start under load).
    env = [{_secret.SECRET_ENV: "secret-a"}, {_secret.SECRET_ENV: "secret-b"}]
    res = workers(
        W.init_expecting_error, 2, timeout=120, per_rank_env=env, check=False,
        env={"TPJ_INIT_TIMEOUT": "8"},
    )  # fmt: skip
    assert "refused this worker's job secret" in (reported(res[1])["error"] or ""), res[1]


def test_insecure_opt_out_warns_at_start_up(workers, tmp_path):
    res = workers(
        W.two_workers_ping, 2, timeout=120,
        env={_secret.INSECURE_ENV: "1", "XDG_CONFIG_HOME": str(tmp_path / "cfg")},
    )  # fmt: skip
    assert [reported(r) for r in res] == [{"reply": 1}, {"reply": 2}]
    for r in res:
        assert "WITHOUT authentication" in r.stderr, r
    assert not (tmp_path / "cfg").exists()  # the per-user file was not used


# A launched worker hands back a digest of the secret it got (never the secret). It
# imports neither JAX nor tensorplay_jax: what is tested is the launcher's environment.
DIGEST_SCRIPT = """\
import hashlib, os
from tests._worker import hand_back
secret = os.environ.get("TENSORPLAY_JAX_RPC_SECRET", "")
hand_back({"digest": hashlib.sha256(secret.encode()).hexdigest()[:16], "length": len(secret)})
"""


def _launch(
    out: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """The launcher on the digest script; its workers hand back into ``out`` (made here)."""
    out.mkdir()
    script = out / "digest.py"
    script.write_text(DIGEST_SCRIPT)
    e = {k: v for k, v in os.environ.items() if k not in _SECRET_VARS}
    e.update(PYTHONPATH=str(REPO_ROOT), JAX_PLATFORMS="cpu", **{OUT_DIR: str(out)}, **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "tensorplay_jax.run", *args, str(script)],
        env=e, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def _secrets_seen(out: Path, env: dict[str, str] | None = None) -> set[tuple[str, int]]:
    """(digest, length) of the secret each of two launched workers got."""
    p = _launch(out, "--nproc", "2", env=env)
    assert p.returncode == 0, p.stderr
    seen = [handed_back(out, r, p.stderr) for r in (0, 1)]
    return {(v["digest"], v["length"]) for v in seen}


def test_launcher_makes_a_fresh_secret_per_job(tmp_path):
    a, b = _secrets_seen(tmp_path / "a"), _secrets_seen(tmp_path / "b")
    assert len(a) == 1 and len(b) == 1, (a, b)  # one secret per job ...
    assert a != b  # ... fresh each time
    assert next(iter(a))[1] == 64
    given = _secrets_seen(tmp_path / "given", env={_secret.SECRET_ENV: "mine"})
    assert given == {(_sha("mine"), 4)}  # the user's secret passes through


def _sha(s: str) -> str:
    import hashlib

    return hashlib.sha256(s.encode()).hexdigest()[:16]


def test_launcher_refuses_a_multi_node_job_without_a_secret(tmp_path):
    args = ("--nnodes", "2", "--node-rank", "0", "--nproc", "1",
            "--master-addr", "198.18.0.1", "--master-port", "29999")  # fmt: skip
    r = _launch(tmp_path / "multi", *args)
    assert r.returncode == 2 and "needs the same secret on every node" in r.stderr, r.stderr
    assert "--insecure" in r.stderr and _secret.SECRET_ENV in r.stderr
    empty = _launch(tmp_path / "empty", "--nproc", "1", env={_secret.SECRET_ENV: ""})
    assert empty.returncode == 2 and "set but empty" in empty.stderr, empty.stderr


def test_spawn_gives_its_workers_a_fresh_secret(no_secret_env):
    from tensorplay_jax.rpc import spawn

    a = spawn(_secret_of_worker, 2, timeout=120)
    b = spawn(_secret_of_worker, 1, timeout=120)
    assert a[0] == a[1] and len(a[0]) == 64 and b[0] != a[0]
    assert _secret.SECRET_ENV not in os.environ  # this process did not join: left as it was


def _secret_of_worker(rank: int) -> str:
    return os.environ.get("TENSORPLAY_JAX_RPC_SECRET", "")
