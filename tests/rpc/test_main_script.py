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

from tests._procs import REPO_ROOT, free_port
from tests.rpc import _workers as W

SCRIPT = Path(__file__).with_name("_main_script.py")
SAME_CHECKS = ["rank-is-callee", "globals-persist", "custom-vjp-and-jit", "jit-by-name",
               "remote-class", "class-comes-back", "remote-module", "dist-autograd"]  # fmt: skip


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), JAX_PLATFORMS="cpu")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "XLA_FLAGS"):
        env.pop(k, None)
    return env


def _run(*cmd: str, env: dict[str, str], timeout: float = 150) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tensorplay_jax.run", *cmd],
        env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def test_main_script_objects_resolve_in_the_callees_main():
    p = _run("--nproc", "2", str(SCRIPT), env=_env())
    assert p.returncode == 0, p.stdout + p.stderr
    for rank in (0, 1):
        for name in [*SAME_CHECKS, "done"]:
            line = f"[rank {rank}] {'ok ' if name != 'done' else ''}{name}"
            assert line in p.stdout, (line, p.stdout, p.stderr)
    assert "[rank 0] ok one-parameter-server" in p.stdout  # one server for both trainers


def test_a_different_main_script_gets_values_and_a_clear_error(tmp_path):
    # Two nodes of one job, each running its own copy of the script (the copies differ).
    source = SCRIPT.read_text()
    scripts = [tmp_path / "a.py", tmp_path / "b.py"]
    scripts[0].write_text(source)
    scripts[1].write_text(source + "\n# another script\n")
    env = dict(_env(), TENSORPLAY_JAX_RPC_SECRET="main-script-test-secret")
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
        for name in ("ok by-value-rank-is-caller", "ok clear-error", "done"):
            assert f"[rank {rank}] {name}" in out, (name, out, err)


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
