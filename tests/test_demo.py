"""The README's demo command runs and every gradient it prints follows its rule."""

import os
import subprocess
import sys

from tests._procs import REPO_ROOT


def test_demo_runs_and_checks_pass():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8")
    out = subprocess.run(
        [sys.executable, "-m", "tensorplay_jax.demo"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("[matches the rule]") == 10
    assert "all gradients follow their rules" in out.stdout
