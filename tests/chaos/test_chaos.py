"""The chaos soak's short run (``benchmarks/chaos.py``): training survives churn, nothing leaks.

One run (module-scoped): a server and two trainers for about 15 s (longer on a busy host,
until five faults were injected), with a fault every 0.5-1.5 s (SIGKILL and a
replacement, SIGSTOP past the RPC timeout, or a graceful leave and a replacement). The
script measures; each test asserts one of its targets here.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests._procs import REPO_ROOT

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def soak(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("chaos")
    cmd = [sys.executable, str(REPO_ROOT / "benchmarks" / "chaos.py"), "--seconds", "15"]
    cmd += ["--faults", "5"]  # on a busy host fewer fit in 15 s: the driver goes on for them
    cmd += ["--trainers", "2", "--gap", "0.5", "1.5", "--seed", "1"]
    cmd += ["--tmp", str(out), "--json", str(out / "chaos.json")]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=200, cwd=REPO_ROOT)
    assert (out / "chaos.json").exists(), run.stdout + run.stderr
    return json.loads((out / "chaos.json").read_text())


def test_faults_were_injected(soak):
    assert soak["faults_total"] >= 5, soak["faults"]


def test_the_server_kept_serving(soak):
    assert soak["targets"]["server kept serving"]


def test_every_trainer_left_cleanly_at_the_end(soak):
    assert soak["targets"]["trainers left cleanly at the end"], soak


@pytest.mark.parametrize("count", ["contexts", "owner_rrefs", "forks", "pending"])
def test_server_counts_return_to_their_baseline(soak, count):
    assert soak["after"][count] == soak["before"][count], (soak["before"], soak["after"])


def test_rss_growth_is_under_50_mib(soak):
    assert soak["rss_growth_mib"] < 50, soak


def test_every_error_names_a_worker(soak):
    assert not soak["unnamed_errors"], soak["unnamed_errors"]


def test_the_loss_still_falls(soak):
    assert soak["loss_last20"] < soak["loss_first20"], soak
