"""The README's demo command: the parameter-server demo by default, the collectives demo by name."""

import os
import re
import subprocess
import sys

from tests._procs import REPO_ROOT


def _run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8")
    return subprocess.run(
        [sys.executable, "-m", "tensorplay_jax.demo", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_default_demo_trains_a_parameter_server_and_matches_single_process():
    out = _run()
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Parameter server 'ps' and 2 trainers" in out.stdout, out.stdout
    assert "training:" in out.stderr and "loss=" in out.stderr  # the tqdm bar
    acc = re.search(r"test accuracy: ([\d.]+)%", out.stdout)
    assert acc and float(acc.group(1)) > 90.0, out.stdout
    parity = re.search(r"max \|difference\| = ([\d.e+-]+) .*\[same parameters\]", out.stdout)
    assert parity and float(parity.group(1)) <= 1e-5, out.stdout


def test_asynchronous_mode_trains_without_the_parity_check():
    out = _run("--async", "--epochs", "2")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "asynchronous updates" in out.stdout and "parity check skipped" in out.stdout
    assert re.search(r"test accuracy: [\d.]+%", out.stdout), out.stdout


def test_collectives_demo_runs_and_checks_pass():
    out = _run("collectives")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("[matches the rule]") == 10
    assert "all gradients follow their rules" in out.stdout


def test_bad_demo_name_is_rejected():
    out = _run("nope", timeout=60)
    assert out.returncode == 2 and "invalid choice: 'nope'" in out.stderr


def test_profiled_demo_writes_a_trace_of_every_worker(tmp_path):
    import json

    path = tmp_path / "ps.json"
    out = _run("--epochs", "1", "--profile", str(path))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "[same parameters]" in out.stdout  # recording changes nothing the demo computes
    assert f"trace of every worker written to {path}" in out.stdout
    doc = json.loads(path.read_text())
    assert doc["otherData"]["missing"] == {}
    spans = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    names = {e["pid"]: e["args"]["name"].split(" ")[0] for e in doc["traceEvents"]
             if e["ph"] == "M" and e["name"] == "process_name"}  # fmt: skip
    backward = [names[s["pid"]] for s in spans if s["name"] == "dist_autograd.backward"]
    steps = [names[s["pid"]] for s in spans if s["name"] == "DistributedOptimizer.step (owner)"]
    batches = 1438 // 32  # one epoch of the digits' training split
    assert sorted(set(backward)) == ["trainer1", "trainer2"] and len(backward) == batches
    assert steps == ["ps"] * batches  # every step ran on the server, the parameters' owner
