"""The examples run small: pipeline parallelism over two workers, the RNN with remote parts."""

from __future__ import annotations

from tests._procs import REPO_ROOT
from tests.examples import _workers as W


def _run(workers, name: str, nprocs: int, *args: str):
    path = str(REPO_ROOT / "examples" / name)
    return workers(W.run_example, nprocs, args=(path, *args), timeout=180)


def test_pipeline_parallel(workers):
    out = _run(workers, "pipeline_parallel.py", 3, "--steps", "20")[0].stdout
    assert "pipelined forward matches the unsplit model: True" in out, out
    assert "both shards trained: True" in out, out  # and the loss fell (exit status 0)


def test_rnn_with_remote_embedding_and_decoder(workers):
    out = _run(workers, "rnn_remote.py", 2, "--steps", "15")[1].stdout
    assert "trained: embedding (on ps) True, rnn (on trainer) True, decoder (on ps) True" in out
    assert "step  10" in out, out


def test_the_pytest_example_passes_under_pytest():
    # The example of the "Testing distributed code" guide, run as a user runs it.
    import importlib.metadata
    import os
    import subprocess
    import sys

    installed = importlib.metadata.entry_points(group="pytest11", name="tensorplay_jax")
    plugin = [] if installed else ["-p", "tensorplay_jax_pytest"]
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])
    )
    path = REPO_ROOT / "examples" / "test_dist_grads_example.py"
    cmd = [sys.executable, "-m", "pytest", *plugin, "-p", "no:cacheprovider", "-q", str(path)]
    out = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0 and "3 passed" in out.stdout, out.stdout + out.stderr
