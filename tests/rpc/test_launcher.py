"""The launcher (python -m tensorplay_jax.run), SLURM variables and the spawn helper."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from tensorplay_jax.rpc import spawn
from tensorplay_jax.runtime.init_method import resolve_init, slurm_env
from tensorplay_jax.runtime.settings import LAUNCH_KILL_GRACE_S
from tests._procs import REPO_ROOT, free_port, handed_back
from tests._worker import OUT_DIR

WORKER = """
import os, sys
import tensorplay_jax.distributed as dist
from tensorplay_jax.distributed import rpc
from tests._worker import hand_back
rank = int(os.environ["RANK"])
print("hello from", rank)
env = [os.environ[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE")]
launched = [dist.is_torchelastic_launched(), dist.get_node_local_rank()]
rpc.init_rpc(f"w{rank}", world_size=int(os.environ["WORLD_SIZE"]))
peer_max = rpc.rpc_sync(f"w{1 - rank}", max, args=(rank, 5))
hand_back({"env": env, "argv": sys.argv[1:], "max": peer_max, "launched": launched})
rpc.shutdown()
"""

FAILING = """
import os, sys, time
if os.environ["RANK"] == "1":
    print("rank one fails", flush=True)
    open(os.environ["TPJ_STAMP"], "w").write(repr(time.time()))
    sys.exit(3)
time.sleep(120)
"""


def _launch(tmp_path, body, *flags, timeout=120):
    """The launcher on ``body``; its workers may hand back values into ``tmp_path``."""
    path = tmp_path / "script.py"
    path.write_text(body)
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), JAX_PLATFORMS="cpu")
    env[OUT_DIR] = str(tmp_path)
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    env.pop("TORCHELASTIC_RUN_ID", None)
    cmd = [sys.executable, "-m", "tensorplay_jax.run", *flags, str(path), "--lr", "0.1"]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


def test_launcher_prefixes_output_and_sets_env(tmp_path):
    p = _launch(tmp_path, WORKER, "--nproc", "2")
    assert p.returncode == 0, p.stderr
    lines = set(p.stdout.splitlines())
    assert {f"[rank {r}] hello from {r}" for r in (0, 1)} <= lines, p.stdout  # the product
    for r in (0, 1):
        got = handed_back(tmp_path, r, p.stderr)
        assert got["env"] == [str(r), str(r), "2"], got  # RANK, LOCAL_RANK, WORLD_SIZE
        assert got["argv"] == ["--lr", "0.1"], got
        assert got["max"] == 5, got  # the two ranks reached each other
        # as under torchrun: launched by a launcher, this rank's place on the node
        assert got["launched"] == [True, r], got


def test_launcher_accepts_torchrun_flags(tmp_path):
    flags = ["--nproc-per-node", "2", "--nnodes", "1", "--node-rank", "0",
             "--master-addr", "127.0.0.1", "--master-port", str(free_port())]  # fmt: skip
    p = _launch(tmp_path, WORKER, *flags)
    assert p.returncode == 0, p.stderr
    assert [handed_back(tmp_path, r, p.stderr)["max"] for r in (0, 1)] == [5, 5]


ADDRESS_ENV = """
import os
from tests._worker import hand_back
listen, ifname = (os.environ.get(f"TENSORPLAY_JAX_{k}") for k in ("LISTEN_ADDR", "SOCKET_IFNAME"))
hand_back({"listen": listen, "ifname": ifname})
"""


def test_launcher_address_flags_reach_the_workers(tmp_path):
    for flag in ("--listen-addr", "--local-addr", "--local_addr"):
        out = tmp_path / flag
        out.mkdir()
        p = _launch(out, ADDRESS_ENV, "--nproc", "1", flag, "127.0.0.1", "--ifname", "lo")
        assert p.returncode == 0, p.stderr
        assert handed_back(out, 0, p.stderr) == {"listen": "127.0.0.1", "ifname": "lo"}, flag
    out = tmp_path / "none"
    out.mkdir()
    p = _launch(out, ADDRESS_ENV, "--nproc", "1")
    assert handed_back(out, 0, p.stderr) == {"listen": None, "ifname": None}


def test_launcher_stops_the_others_when_one_fails(tmp_path, monkeypatch):
    stamp = tmp_path / "failed_at"
    monkeypatch.setenv("TPJ_STAMP", str(stamp))
    p = _launch(tmp_path, FAILING, "--nproc", "2", timeout=100)
    assert p.returncode == 3, (p.stdout, p.stderr)
    # rank 0 would sleep 120 s: the launcher stopped it within its kill grace after rank 1 failed
    stopped_after = time.time() - float(stamp.read_text())
    assert stopped_after < LAUNCH_KILL_GRACE_S + 5, stopped_after
    assert "[rank 1] rank one fails" in p.stdout
    assert "worker rank 1 exited with code 3; stopping the other workers" in p.stderr


def test_slurm_variables():
    env = {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1",
           "SLURM_JOB_NODELIST": "gpu-[07-08,11],cpu1", "SLURM_JOB_ID": "4242"}  # fmt: skip
    got = slurm_env(env)
    assert got == {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "MASTER_ADDR": "gpu-07",
                   "MASTER_PORT": str(20000 + 4242)}  # fmt: skip
    assert slurm_env({"SLURM_JOB_NODELIST": "node3"})["MASTER_ADDR"] == "node3"


def test_resolve_init_reads_slurm_when_rank_is_missing(monkeypatch):
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("SLURM_PROCID", "2")
    monkeypatch.setenv("SLURM_NTASKS", "4")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "n[1-4]")
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    assert resolve_init("env://", -1, None) == ("n1", 20007, 2, 4)
    assert resolve_init("tcp://10.0.0.1:1234", 0, 2) == ("10.0.0.1", 1234, 0, 2)


def test_spawn_runs_a_closure_in_local_workers():
    offset = 100  # captured: the function travels by value, as from a notebook

    def body(rank):
        import os

        from tensorplay_jax.distributed import rpc

        rpc.init_rpc(f"n{rank}", world_size=int(os.environ["WORLD_SIZE"]))
        other = rpc.rpc_sync(f"n{1 - rank}", lambda: offset + rank)
        rpc.shutdown()
        return other

    assert spawn(body, 2, timeout=120) == [100, 101]  # the lambda carries its caller's rank
