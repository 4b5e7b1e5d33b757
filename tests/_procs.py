"""The one place that starts N real worker processes for multi-process tests.

Every multi-process test (RPC, distributed autograd, process groups, multi-host
collectives) goes through :func:`run_workers`: it starts ``nprocs`` Python
processes running a script, with ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR`` and ``MASTER_PORT`` set, waits for all of them with a hard
timeout, kills the rest as soon as one fails, and returns their outputs.
:func:`run_on_hosts` runs them on simulated hosts (``tensorplay_jax.testing.netns``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import secrets
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from tensorplay_jax.runtime.launch import port_is_free
from tensorplay_jax.runtime.settings import LISTEN_ADDR_ENV, SOCKET_IFNAME_ENV
from tensorplay_jax.testing.netns import Cluster
from tests._worker import OUT_DIR, RESULT

REPO_ROOT = Path(__file__).resolve().parent.parent
ADDRESS_CHOICES = (LISTEN_ADDR_ENV, SOCKET_IFNAME_ENV, "GLOO_SOCKET_IFNAME")


def _port_slice() -> range:
    """This pytest worker's own ports: below the kernel's ephemeral range, one slice each.

    Outgoing connections (thousands in this suite) take ephemeral ports at any moment,
    so a port found free there can be taken before the job binds it; the kernel hands
    out none below that range, and each xdist worker picks from its own slice.
    """
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            top = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        top = 32768
    bottom = 10000
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    count = max(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")), index + 1)
    width = (top - bottom) // count
    return range(bottom + index * width, bottom + (index + 1) * width - 1)


_next_port: list[int] = []


def free_port(host: str = "127.0.0.1") -> int:
    """A port for a test job, free on ``host`` with the next one (``MASTER_PORT + 1``).

    Taken in turn from this pytest worker's slice (:func:`_port_slice`), skipping any
    that a running process still holds.
    """
    ports = _port_slice()
    if not _next_port:
        _next_port.append(ports.start + secrets.randbelow(len(ports)))  # runs differ
    for _ in range(len(ports)):
        port = _next_port[0]
        _next_port[0] = port + 2 if port + 2 < ports.stop else ports.start
        if port_is_free(host, port) and port_is_free(host, port + 1):
            return port
    raise RuntimeError(f"free_port: no two free consecutive ports in {ports} on {host}")


@dataclasses.dataclass
class WorkerResult:
    rank: int
    returncode: int | None
    stdout: str
    stderr: str

    def __str__(self) -> str:
        return (
            f"--- rank {self.rank} exited {self.returncode} ---\n"
            f"[stdout]\n{self.stdout}\n[stderr]\n{self.stderr}"
        )


def reported(result: WorkerResult | subprocess.CompletedProcess) -> dict:
    """The values a process handed back with ``tests._worker.report`` (exactly one line).

    ``result``: a worker's (:func:`run_workers`) or any process's whose stdout was captured
    as text.
    """
    lines = [ln[len(RESULT) :] for ln in result.stdout.splitlines() if ln.startswith(RESULT)]
    assert len(lines) == 1, f"expected one {RESULT.strip()} line\n{result}"
    return json.loads(lines[0])


def collected(out_dir: Path, results: Sequence[WorkerResult]) -> list[dict]:
    """Each rank's :func:`tests._worker.hand_back` values from ``out_dir``, in rank order.

    The workers ran with ``TPJ_TEST_OUT`` (``tests._worker.OUT_DIR``) set to ``out_dir``.
    """
    return [handed_back(out_dir, r.rank, str(r)) for r in results]


def handed_back(out_dir: Path, rank: int, context: str = "") -> dict:
    """The values rank ``rank`` handed back with :func:`tests._worker.hand_back` in ``out_dir``.

    For processes that :func:`run_workers` did not start (a launcher's, a script's);
    ``context`` (their output) goes into the failure message when there is nothing.
    """
    path = Path(out_dir) / f"{rank}.pkl"
    assert path.exists(), f"rank {rank} handed nothing back\n{context}"
    return pickle.loads(path.read_bytes())


def run_and_collect(
    script: Callable[[], object], nprocs: int, out_dir: Path, **kwargs: object
) -> list[dict]:
    """:func:`run_workers`, then each rank's :func:`tests._worker.hand_back` values, in rank order.

    ``out_dir`` is an empty directory (e.g. from ``tmp_path_factory``); other arguments
    go to :func:`run_workers` (an ``env`` given there is extended, not replaced).
    """
    env = {**dict(kwargs.pop("env", None) or {}), OUT_DIR: str(out_dir)}  # type: ignore[arg-type]
    return collected(out_dir, run_workers(script, nprocs, env=env, **kwargs))  # type: ignore[arg-type]


class WorkersFailed(AssertionError):
    """One or more worker processes failed or timed out."""


def function_script(target: Callable[[], object]) -> str:
    """The worker source that imports ``target`` (a module-level function) and calls it.

    Worker code stays a real function in a module (``tests/security/_workers.py`` ...),
    so it is linted, importable and shared; only this one line travels as text.
    """
    mod, name = target.__module__, target.__qualname__
    if "<" in name or mod == "__main__":
        raise ValueError(f"run_workers: {name} must be a module-level function in a module")
    return f"from {mod} import {name} as _target\n_target()\n"


def run_workers(
    script: str | Callable[[], object],
    nprocs: int,
    *,
    timeout: float = 120.0,
    env: Mapping[str, str | None] | None = None,
    per_rank_env: Sequence[Mapping[str, str]] | None = None,
    args: Sequence[str] = (),
    check: bool = True,
    devices_per_process: int = 1,
    master_port: int | None = None,
    allow_exit: Mapping[int, int] | None = None,
    wrap: Callable[[int, list[str]], list[str]] | None = None,
    on_stop: Callable[[], object] | None = None,
) -> list[WorkerResult]:
    """Run ``script`` (Python source, dedented, or a module-level function) in N processes.

    Args:
      script: Python source for every worker, or a module-level function that every
        worker imports and calls; either reads its rank from ``RANK``.
      nprocs: number of processes.
      timeout: seconds for the whole group; on expiry every worker is killed.
      env: extra environment for every worker (a None value unsets the variable).
      per_rank_env: extra environment per rank.
      args: command-line arguments passed to the script (``sys.argv[1:]``).
      check: raise :class:`WorkersFailed` with every worker's output unless all exit 0.
      devices_per_process: virtual CPU devices each worker's JAX sees.
      master_port: rendezvous port (a free one by default).
      allow_exit: ``{rank: returncode}`` for workers expected to die (e.g. ``{1: -9}``
        for a peer a test kills with SIGKILL): that exit neither stops the others
        nor fails ``check``.
      wrap: ``wrap(rank, argv)`` is the command line rank ``rank`` runs instead of
        ``argv`` (e.g. ``argv`` on a simulated host).
      on_stop: called after the workers are killed on a failure, a timeout or an
        interrupt (e.g. to kill what they started).

    Returns:
      One :class:`WorkerResult` per rank, in rank order.
    """
    port = master_port or free_port()
    src = function_script(script) if callable(script) else textwrap.dedent(script)
    base = dict(os.environ)
    base.pop("XLA_FLAGS", None)
    base.update(
        {
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "WORLD_SIZE": str(nprocs),
            "JAX_PLATFORMS": "cpu",
            "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices_per_process}",
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(REPO_ROOT), base.get("PYTHONPATH", "")) if p
            ),
            "PYTHONUNBUFFERED": "1",
        }
    )
    for key, value in (env or {}).items():
        if value is None:
            base.pop(key, None)
        else:
            base[key] = value
    procs: list[subprocess.Popen] = []
    for rank in range(nprocs):
        penv = dict(base, RANK=str(rank), LOCAL_RANK=str(rank))
        if per_rank_env:
            penv.update(per_rank_env[rank])
        argv = [sys.executable, "-c", src, *args]
        procs.append(
            subprocess.Popen(
                wrap(rank, argv) if wrap else argv,
                env=penv,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
        )
    allowed = dict(allow_exit or {})

    def bad(rank: int, code: int | None) -> bool:
        return code not in (None, 0) and allowed.get(rank) != code

    def stop() -> None:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
        if on_stop is not None:
            on_stop()

    deadline = time.monotonic() + timeout
    timed_out = False
    failed = False
    try:
        while any(p.poll() is None for p in procs):
            if any(bad(r, p.returncode) for r, p in enumerate(procs)):
                failed = True
                break
            if time.monotonic() > deadline:
                timed_out = True
                break
            time.sleep(0.05)
        if timed_out or failed:
            # Give the others a moment to report their own error, then stop them.
            grace = time.monotonic() + (0 if timed_out else 5.0)
            while any(p.poll() is None for p in procs) and time.monotonic() < grace:
                time.sleep(0.05)
            stop()
    except BaseException:  # an interrupt, or the test's own timeout: leave nothing running
        stop()
        raise
    results = []
    for rank, p in enumerate(procs):
        out, err = p.communicate()
        results.append(WorkerResult(rank, p.returncode, out, err))
    if check and (timed_out or any(bad(r.rank, r.returncode) for r in results)):
        head = f"workers timed out after {timeout}s" if timed_out else "a worker failed"
        raise WorkersFailed(head + "\n" + "\n".join(str(r) for r in results))
    return results


def run_on_hosts(
    cluster: Cluster,
    script: str | Callable[[], object] | None,
    hosts: Sequence[int],
    *,
    commands: Sequence[Sequence[str]] | None = None,
    env: Mapping[str, str | None] | None = None,
    per_rank_env: Sequence[Mapping[str, str]] | None = None,
    **kwargs: object,
) -> list[WorkerResult]:
    """:func:`run_workers` with rank ``r`` on simulated host ``hosts[r]`` of ``cluster``.

    Rank 0's host is ``MASTER_ADDR``; every worker gets ``LOCAL_RANK`` and
    ``LOCAL_WORLD_SIZE`` (its place among the ranks on its host), the job's secret
    (a fresh ``TENSORPLAY_JAX_RPC_SECRET``, as a multi-node job needs), ``TPJ_HOSTS``
    (a JSON list: every rank's host name), and none of the variables that choose an
    address (``ADDRESS_CHOICES``, unset even when the test process has them).
    ``commands[r]``, when given, is rank ``r``'s command line (e.g. a launcher) and
    ``script`` is None. On a failure, a timeout or an interrupt everything on those
    hosts is killed. Other arguments: :func:`run_workers`.

    Example: ``run_on_hosts(cluster, W.rpc_calls, [0, 0, 1, 1], timeout=120)``.
    """
    hosts = list(hosts)
    per_rank = [
        {
            "LOCAL_RANK": str(hosts[:r].count(h)),
            "LOCAL_WORLD_SIZE": str(hosts.count(h)),
            **(per_rank_env[r] if per_rank_env else {}),
        }
        for r, h in enumerate(hosts)
    ]
    base: dict[str, str | None] = {
        **dict.fromkeys(ADDRESS_CHOICES),  # unset: the defaults must work
        "MASTER_ADDR": cluster.addresses[hosts[0]],
        "TENSORPLAY_JAX_RPC_SECRET": secrets.token_hex(16),
        "TPJ_HOSTS": json.dumps([cluster.hosts[h] for h in hosts]),
        **(env or {}),
    }

    def wrap(rank: int, argv: list[str]) -> list[str]:
        return cluster.command(hosts[rank], list(commands[rank]) if commands else argv)

    def kill_hosts() -> None:
        for h in sorted(set(hosts)):
            cluster.kill(h)

    return run_workers(
        "" if script is None else script,
        len(hosts),
        env=base,
        per_rank_env=per_rank,
        wrap=wrap,
        on_stop=kill_hosts,
        **kwargs,  # type: ignore[arg-type]
    )
