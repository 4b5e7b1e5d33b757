"""Start benchmark worker functions on the hosts of a simulated cluster (``testing.netns``).

A worker is a plain function ``module:func`` called with JSON arguments in a
fresh interpreter on host ``i`` of a :class:`~tensorplay_jax.testing.netns.Cluster`
(its own network namespace and host name), with the repository on
``PYTHONPATH`` and the environment given. ``python`` picks the interpreter, so
torch workers run in torch's environment and ours in ours. A worker reports by
writing JSON to the path it is given (:func:`result_path`).

Example (from a benchmark script)::

    with Cluster(2) as c:
        procs = [start(c, i, "benchmarks.crosshost:ours", [i, out], env) for i in (0, 1)]
        wait(procs, timeout=600)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tensorplay_jax.testing import netns

ROOT = Path(__file__).resolve().parents[1]
OURS_PYTHON = sys.executable
TORCH_PYTHON = os.environ.get("TPJ_BENCH_TORCH_PYTHON", "/tmp/benchvenv/bin/python")

_BOOT = (
    "import importlib, json, sys; m, f = sys.argv[1].split(':'); "
    "getattr(importlib.import_module(m), f)(*json.loads(sys.argv[2]))"
)


def unavailable() -> str | None:
    """Why no cluster can be built here (None when it can)."""
    return netns.unavailable()


def start(
    cluster: netns.Cluster,
    host: int,
    target: str,
    args: Sequence[Any],
    env: dict[str, str] | None = None,
    python: str = OURS_PYTHON,
) -> subprocess.Popen:
    """Run ``target`` ("module:function") with ``args`` on host ``host`` of ``cluster``."""
    full = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu", **(env or {}))
    argv = cluster.command(host, [python, "-c", _BOOT, target, json.dumps(list(args))])
    return subprocess.Popen(argv, env=full, cwd=ROOT)


def wait(procs: Sequence[subprocess.Popen], timeout: float) -> None:
    """Wait for every worker; kill them all and raise if one fails or ``timeout`` passes."""
    try:
        for p in procs:
            if p.wait(timeout=timeout) != 0:
                raise RuntimeError(f"a benchmark worker failed (exit {p.returncode}): {p.args[-2]}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=30)


def result_path(tag: str) -> str:
    """A fresh file name for a worker's JSON result."""
    fd, path = tempfile.mkstemp(prefix=f"tpj-xh-{tag}-", suffix=".json")
    os.close(fd)
    return path


def read_result(path: str) -> dict[str, Any]:
    """What a worker wrote to ``path`` (the file is removed)."""
    try:
        return json.loads(Path(path).read_text())
    finally:
        os.unlink(path)


def run(
    cluster: netns.Cluster,
    targets: Sequence[tuple[str, Sequence[Any]]],
    env: dict[str, str] | None = None,
    python: str = OURS_PYTHON,
    timeout: float = 600,
) -> None:
    """Start ``targets[i]`` on host ``i`` (all at once) and wait for all of them."""
    procs = [start(cluster, i, t, a, env, python) for i, (t, a) in enumerate(targets)]
    wait(procs, timeout)
