"""``python -m tensorplay_jax.check`` on this CPU-only host: the CPU equivalents, every step ok.

One run of the command (its own process, as a user starts it), asserted by its
table. The values each step checks come from NumPy and ``jax.grad``
(see ``tensorplay_jax/check.py``).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.fixture(scope="module")
def report() -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # the command sets its own
    return subprocess.run(
        [sys.executable, "-m", "tensorplay_jax.check"],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        check=False,
    )


def test_the_check_passes_every_step_on_cpu(report):
    assert report.returncode == 0, report.stdout + report.stderr
    rows = [line.split()[:2] for line in report.stdout.splitlines() if " ok " in f"{line} "]
    steps = {"collectives", "rpc", "dist_autograd", "sharded", "process_group"}
    assert steps <= {r[0] for r in rows if r[1] == "ok"}, report.stdout


def test_the_check_says_it_ran_the_cpu_equivalents(report):
    assert "no accelerator here: running the CPU equivalents on 4 virtual CPU devices" in (
        report.stdout
    )
    assert "devices: cpu:0 (cpu), cpu:1 (cpu), cpu:2 (cpu), cpu:3 (cpu)" in report.stdout
