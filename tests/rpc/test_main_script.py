"""Main-script functions and classes: by name where the callee runs the same script, else by value.

``_main_script.py`` is a real tensorplay-shaped script started with the launcher;
``_workers.notebook_cells`` defines functions the way a notebook does, on a started
worker (whose ``__main__`` has no file), and calls the test process with them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests._procs import REPO_ROOT, free_port, handed_back
from tests._worker import OUT_DIR
from tests.rpc import _workers as W

SCRIPT = Path(__file__).with_name("_main_script.py")


def _same_script_seen(rank: int) -> dict[str, object]:
    """What each check of ``_main_script.py`` sees on ``rank`` when both run the script."""
    peer = 1 - rank
    seen: dict[str, object] = {
        "rank-is-callee": peer,  # the callee's RANK: the function ran by name there
        "globals-persist": [1, 2, 3],
        "custom-vjp-and-jit": [10.0 + peer] * 3,  # clipped gradient 1, times 10, plus RANK
        "jit-by-name": [5.0, -20.0, 40.0],
        "remote-class": 7,
        "class-comes-back": ["Counter", peer],
        "remote-module": [2.0 + peer] * 3,
        "dist-autograd": [peer + 2.0] * 3,
    }
    if rank == 0:  # one server for both trainers: made once, stepped twice by each
        seen |= {"trainers-finished": True, "one-parameter-server": [1, 4, 0]}
    return seen


def _env(out: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), JAX_PLATFORMS="cpu", **{OUT_DIR: str(out)})
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "XLA_FLAGS"):
        env.pop(k, None)
    return env


def _run(*cmd: str, env: dict[str, str], timeout: float = 150) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tensorplay_jax.run", *cmd],
        env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def test_main_script_objects_resolve_in_the_callees_main(tmp_path):
    p = _run("--nproc", "2", str(SCRIPT), env=_env(tmp_path))
    assert p.returncode == 0, p.stdout + p.stderr
    for rank in (0, 1):
        assert handed_back(tmp_path, rank, p.stderr) == _same_script_seen(rank)


def test_a_different_main_script_gets_values_and_a_clear_error(tmp_path):
    # Two nodes of one job, each running its own copy of the script (the copies differ).
    source = SCRIPT.read_text()
    scripts = [tmp_path / "a.py", tmp_path / "b.py"]
    scripts[0].write_text(source)
    scripts[1].write_text(source + "\n# another script\n")
    env = dict(_env(tmp_path), TENSORPLAY_JAX_RPC_SECRET="main-script-test-secret")
    port = str(free_port())
    procs = []
    for node, script in enumerate(scripts):
        flags = ["--nnodes", "2", "--node-rank", str(node), "--nproc-per-node", "1",
                 "--master-addr", "127.0.0.1", "--master-port", port]  # fmt: skip
        cmd = [sys.executable, "-m", "tensorplay_jax.run", *flags, str(script), "--other"]
        pipe = subprocess.PIPE
        procs.append(subprocess.Popen(cmd, env=env, stdout=pipe, stderr=pipe, text=True))
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=150)
            outs.append((p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    for rank, (code, out, err) in enumerate(outs):
        assert code == 0, (rank, out, err)
        seen = handed_back(tmp_path, rank, err)
        assert seen["by-value-rank-is-caller"] == rank, seen  # the caller's RANK: by value
        error = seen["clear-error"] or ""
        assert "get_parameter_server" in error and "same main script" in error, seen


@pytest.mark.workers(2, names=["w0", "w1"])
def test_notebook_functions_travel_by_value(dist_workers):
    got = dist_workers.run("w1", W.notebook_cells)
    assert got["by_value"] == 1 and got["closure"] == 11, got  # w1's RANK: the caller's globals
    assert got["to_itself"] == 1, got
    why = [
        "TypeError",
        "cell_locked_rank",
        "no main script file",
        "pickling it failed",
        "can import",
    ]
    assert all(s in (got["with_a_lock"] or "") for s in why), got
