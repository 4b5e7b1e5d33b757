"""Start one benchmark job (N worker processes on this host) and collect rank 0's JSON result."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 now (for MASTER_PORT)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_job(boot: str, argv: Sequence[Sequence[str]], what: str, *, timeout: float = 1800) -> Any:
    """Run ``python -c boot ARGV[r]... OUT`` for each rank ``r``; return what rank 0 wrote to OUT.

    Workers import this checkout first (``PYTHONPATH``), run XLA on the CPU and keep
    quiet about deprecations; the result file is their last argument.
    """
    out = f"/tmp/tpj-bench-{what}-{os.getpid()}.json"
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONWARNINGS="ignore")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    procs = [
        subprocess.Popen([sys.executable, "-c", boot, *a, out], env=env, cwd=ROOT) for a in argv
    ]
    for p in procs:
        if p.wait(timeout=timeout) != 0:
            raise SystemExit(f"{what} benchmark worker failed")
    res = json.loads(Path(out).read_text())
    os.unlink(out)
    return res
