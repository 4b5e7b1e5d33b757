"""Start benchmark jobs (N worker processes on this host) and collect rank 0's JSON results.

:func:`run_job` runs a job to its end and returns what rank 0 wrote. :class:`Job`
keeps a job up while its rank 0 answers requests (:func:`answer_requests`), so that
two jobs, ours and torch's, can take turns step by step and meet the machine's
load in the same minutes. The job that waits for its turn is stopped (``SIGSTOP``):
an idle torch RPC worker keeps polling its shared-memory transport (0.6-0.7 CPU
seconds per second per process here), which would slow the other job's steps.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
_MARK = "@@tpj-bench "  # rank 0's answer lines start with this; other output is passed on


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 now (for MASTER_PORT)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_env() -> dict[str, str]:
    """Workers import this checkout first (``PYTHONPATH``), run XLA on the CPU and keep
    quiet about deprecations."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONWARNINGS="ignore")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def run_job(boot: str, argv: Sequence[Sequence[str]], what: str, *, timeout: float = 1800) -> Any:
    """Run ``python -c boot ARGV[r]... OUT`` for each rank ``r``; return what rank 0 wrote to OUT.

    The result file is the workers' last argument.
    """
    out = f"/tmp/tpj-bench-{what}-{os.getpid()}.json"
    procs = [
        subprocess.Popen([sys.executable, "-c", boot, *a, out], env=worker_env(), cwd=ROOT)
        for a in argv
    ]
    for p in procs:
        if p.wait(timeout=timeout) != 0:
            raise SystemExit(f"{what} benchmark worker failed")
    res = json.loads(Path(out).read_text())
    os.unlink(out)
    return res


class Job:
    """A job of ``python -c boot ARGV[r]...`` workers whose rank 0 answers requests.

    Rank 0 calls :func:`answer_requests`; :meth:`ask` sends it one JSON request and
    returns its answer, waiting at most ``timeout`` seconds; :meth:`pause` stops every
    worker of the job until the next :meth:`ask`; :meth:`close` ends the job.

    Example (two jobs taking turns)::

        jobs = [Job(boot, argv_ours, "ours"), Job(boot, argv_torch, "torch")]
        for block in range(8):
            for job in jobs if block % 2 == 0 else jobs[::-1]:
                times[job.what].append(job.ask({"steps": 3}))
                job.pause()
        for job in jobs:
            job.close()
    """

    def __init__(
        self, boot: str, argv: Sequence[Sequence[str]], what: str, *, timeout: float = 600
    ) -> None:
        self.what, self.timeout = what, timeout
        env = worker_env()
        self._procs = [
            subprocess.Popen(
                [sys.executable, "-c", boot, *argv[0]],
                env=env,
                cwd=ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
        ]
        self._procs += [
            subprocess.Popen([sys.executable, "-c", boot, *a], env=env, cwd=ROOT) for a in argv[1:]
        ]

    def ask(self, request: Any) -> Any:
        """Send ``request`` to rank 0 and return its answer.

        Raises:
            SystemExit: rank 0 exited, or did not answer within ``timeout`` seconds.
        """
        self._signal(signal.SIGCONT)
        rank0 = self._procs[0]
        assert rank0.stdin is not None and rank0.stdout is not None
        rank0.stdin.write(json.dumps(request) + "\n")
        rank0.stdin.flush()
        deadline = time.monotonic() + self.timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([rank0.stdout], [], [], left)[0]:
                self.kill()
                raise SystemExit(f"{self.what} benchmark: no answer within {self.timeout:.0f} s")
            line = rank0.stdout.readline()
            if not line:
                self.kill()
                raise SystemExit(f"{self.what} benchmark: rank 0 exited (status {rank0.wait()})")
            if line.startswith(_MARK):
                return json.loads(line[len(_MARK) :])
            sys.stdout.write(line)  # the worker's own output

    def pause(self) -> None:
        """Stop every worker (``SIGSTOP``) until the next :meth:`ask` or :meth:`close`."""
        self._signal(signal.SIGSTOP)

    def _signal(self, sig: int) -> None:
        for p in self._procs:
            if p.poll() is None:
                p.send_signal(sig)

    def close(self) -> None:
        """Tell rank 0 to stop answering, and wait for every worker to exit."""
        self._signal(signal.SIGCONT)
        rank0 = self._procs[0]
        assert rank0.stdin is not None
        rank0.stdin.write("null\n")
        rank0.stdin.close()
        try:
            for p in self._procs:
                if p.wait(timeout=self.timeout) != 0:
                    raise SystemExit(f"{self.what} benchmark worker failed")
        finally:
            self.kill()

    def kill(self) -> None:
        """Kill the workers that are still running."""
        for p in self._procs:
            if p.poll() is None:
                p.kill()  # SIGKILL ends a stopped process too
                p.wait()


def answer_requests(handle: Callable[[Any], Any]) -> None:
    """In rank 0 of a :class:`Job`: answer each request from stdin with ``handle(request)``
    until the request ``null``."""
    for line in sys.stdin:
        request = json.loads(line)
        if request is None:
            return
        print(_MARK + json.dumps(handle(request)), flush=True)
