"""Every Python example in the README and the documentation runs as shown.

Each distinct ```python block of README.md and docs/**/*.md runs once (a block shown
on several pages is one test), as a script in a fresh process; one whose first lines
say ``python -m tensorplay_jax.run --nproc N`` runs under the launcher with N workers.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests._docs import python_blocks
from tests._procs import REPO_ROOT, free_port

BLOCKS = python_blocks()


@pytest.mark.parametrize("code", list(BLOCKS), ids=[where[0] for where in BLOCKS.values()])
def test_documented_example_runs(code, tmp_path):
    path = tmp_path / "example.py"
    path.write_text(code)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MASTER_", "RANK", "WORLD"))}
    env.update(XLA_FLAGS="--xla_force_host_platform_device_count=8", PYTHONPATH=str(REPO_ROOT))
    launch = re.search(r"python -m tensorplay_jax\.run --nproc (\d+)", code)
    cmd = [sys.executable, str(path)]
    if launch:
        nproc = launch.group(1)
        cmd = [sys.executable, "-m", "tensorplay_jax.run", "--nproc", nproc]
        cmd += ["--master-port", str(free_port()), str(path)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240, cwd=tmp_path)
    where = ", ".join(BLOCKS[code])
    assert out.returncode == 0, f"example at {where}:\n{code}\n{out.stdout}\n{out.stderr}"


def test_readme_shows_an_rpc_and_a_collective_example():
    readme = [code for code, where in BLOCKS.items() if any(w.startswith("README") for w in where)]
    assert any("dist_autograd.backward" in code and "rpc_sync" in code for code in readme)
    assert any("tensorplay_jax.collectives" in code for code in readme)


def test_the_documentation_has_examples():
    assert len(BLOCKS) >= 10
