"""Every Python example in the README runs as shown (multi-worker ones under the launcher)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests._procs import REPO_ROOT, free_port

BLOCKS = re.findall(r"```python\n(.*?)```", (REPO_ROOT / "README.md").read_text(), re.S)


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index, tmp_path):
    code = BLOCKS[index]
    path = tmp_path / f"readme_example_{index}.py"
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
    assert out.returncode == 0, f"README example {index}:\n{code}\n{out.stdout}\n{out.stderr}"


def test_readme_has_examples():
    assert len(BLOCKS) >= 6
