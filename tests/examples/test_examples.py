"""The examples run small: pipeline parallelism over two workers, the RNN with remote parts."""

from __future__ import annotations

from tests._procs import REPO_ROOT, reported
from tests.examples import _workers as W


def _checks(workers, name: str, nprocs: int, rank: int, *args: str) -> dict[str, bool]:
    """The named checks the example ``name``'s ``run`` returned on ``rank``."""
    path = str(REPO_ROOT / "examples" / name)
    res = workers(W.run_example, nprocs, args=(path, *args), timeout=180)
    return reported(res[rank])["checks"]


def test_pipeline_parallel(workers):
    assert _checks(workers, "pipeline_parallel.py", 3, 0, "--steps", "20") == {
        "pipelined forward matches the unsplit model": True,
        "the loss fell": True,
        "both shards trained": True,
    }


def test_rnn_with_remote_embedding_and_decoder(workers):
    assert _checks(workers, "rnn_remote.py", 2, 1, "--steps", "15") == {
        "the loss halved": True,
        "trained: embedding (on ps)": True,
        "trained: rnn (on trainer)": True,
        "trained: decoder (on ps)": True,
    }


def test_the_pytest_example_passes_under_pytest(tmp_path):
    # The example of the "Testing distributed code" guide, run as a user runs it.
    import importlib.metadata
    import os
    import subprocess
    import sys
    import xml.etree.ElementTree as ET

    installed = importlib.metadata.entry_points(group="pytest11", name="tensorplay_jax")
    plugin = [] if installed else ["-p", "tensorplay_jax_pytest"]
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])
    )
    path = REPO_ROOT / "examples" / "test_dist_grads_example.py"
    junit = tmp_path / "report.xml"  # pytest's own structured report of the run
    cmd = [sys.executable, "-m", "pytest", *plugin, "-p", "no:cacheprovider", "-q",
           f"--junitxml={junit}", str(path)]  # fmt: skip
    out = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    suite = ET.parse(junit).getroot().find("testsuite")
    counts = {k: int(suite.get(k)) for k in ("tests", "failures", "errors", "skipped")}
    assert counts == {"tests": 3, "failures": 0, "errors": 0, "skipped": 0}, out.stdout
