"""Start local worker processes: the launcher's engine and ``spawn`` (for notebooks and scripts).

Used by ``python -m tensorplay_jax.run`` and re-exported as ``rpc.spawn``.

Each worker gets ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``,
``MASTER_ADDR`` and ``MASTER_PORT``; every line it prints is forwarded with a
``[rank N]`` prefix; if one worker fails, the others are stopped (SIGTERM,
then SIGKILL after ``LAUNCH_KILL_GRACE_S``) and the failure is reported.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import cloudpickle

from tensorplay_jax.runtime import settings
from tensorplay_jax.runtime._main_script import (
    BOOT,
    MainByName,
    check_not_importing_main,
    main_script,
)
from tensorplay_jax.runtime.compile_cache import job_cache_env
from tensorplay_jax.runtime.pickling import Pickler
from tensorplay_jax.runtime.placement import worker_placement
from tensorplay_jax.runtime.secret import new_secret
from tensorplay_jax.runtime.settings import (
    INSECURE_ENV,
    LAUNCH_KILL_GRACE_S,
    LAUNCHED_NS_ENV,
    SECRET_ENV,
    SECRET_FILE_ENV,
)

__all__ = [
    "LocalWorkers",
    "WorkerProcesses",
    "free_port",
    "launch_secret_env",
    "pid_alive",
    "spawn",
    "worker_env",
]


def port_is_free(host: str, port: int) -> bool:
    """Whether a TCP listener could bind ``port`` on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now, and the port after it too.

    A job's ``MASTER_PORT`` takes both: ``init_process_group`` runs JAX's
    coordination service on ``MASTER_PORT + 1``.

    Raises:
      RuntimeError: no such pair was found in 64 tries.

    Example:
      >>> port = free_port()
      >>> 0 < port < 65535 and port_is_free("127.0.0.1", port + 1)
      True
    """
    for _ in range(64):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        if port < 65535 and port_is_free(host, port + 1):
            return port
    raise RuntimeError(f"free_port: found no two free consecutive TCP ports on {host}")


def launch_secret_env(where: str, multi_node: bool, insecure: bool = False) -> dict[str, str]:
    """The secret variables a launcher gives its children: the user's, else a fresh one per job.

    A job that spans nodes cannot share a secret this launcher makes up, so it
    needs the user's (or an explicit ``insecure``).

    Raises:
      ValueError: the user's secret is empty, or a multi-node job has none.

    Example:
      >>> env = launch_secret_env("spawn", multi_node=False)  # with no secret set
      >>> sorted(env) == ["TENSORPLAY_JAX_RPC_SECRET"] or env == {}
      True
    """
    given = settings.raw(SECRET_ENV)
    if given is not None:
        if not given.strip():
            raise ValueError(
                f"{where}: {SECRET_ENV} is set but empty; an empty secret never means 'no "
                "authentication' (unset it for a fresh per-job secret)"
            )
        return {}
    if settings.raw(SECRET_FILE_ENV):
        return {}
    if insecure:
        print(
            f"{where}: WARNING: --insecure: this job runs without authentication; anyone who "
            "can reach its ports can run code in its workers",
            file=sys.stderr,
            flush=True,
        )
        return {INSECURE_ENV: "1"}
    if multi_node:
        raise ValueError(
            f"{where}: a job on several nodes needs the same secret on every node: set "
            f"{SECRET_ENV} (e.g. `export {SECRET_ENV}=$(python -c 'import secrets; "
            f"print(secrets.token_hex(32))')` before every node's launcher) or {SECRET_FILE_ENV} "
            "(a file on a shared filesystem with mode 600); or pass --insecure on a trusted "
            "network"
        )
    return {SECRET_ENV: new_secret()}


def _forward(stream: IO[str], out: IO[str], prefix: str, lock: threading.Lock) -> None:
    """Copy a worker's lines to ``out``; once ``out`` refuses them (closed, or a notebook
    kernel shutting down), read and drop the rest, so the worker never blocks on a full
    pipe."""
    writable = True
    for line in iter(stream.readline, ""):
        if not writable:
            continue
        with lock:
            try:
                out.write(prefix + line if prefix else line)
                out.flush()
            except (ValueError, OSError, RuntimeError):
                writable = False
    stream.close()


class WorkerProcesses:
    """N started worker processes whose output is forwarded with a rank prefix."""

    def __init__(
        self,
        cmds: Sequence[Sequence[str]],
        envs: Sequence[Mapping[str, str]],
        ranks: Sequence[int],
        *,
        prefix: bool = True,
        stdout: IO[str] | None = None,
        stderr: IO[str] | None = None,
    ) -> None:
        self.ranks = list(ranks)
        self.procs: list[subprocess.Popen[str]] = []
        self._threads: list[threading.Thread] = []
        lock = threading.Lock()
        out, err = stdout or sys.stdout, stderr or sys.stderr
        for cmd, env, rank in zip(cmds, envs, ranks, strict=True):
            p = subprocess.Popen(
                list(cmd),
                env={**env, LAUNCHED_NS_ENV: str(time.time_ns())},  # the profiler's start-up
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                bufsize=1,
                start_new_session=True,
            )
            self.procs.append(p)
            pre = f"[rank {rank}] " if prefix else ""
            for src, dst in ((p.stdout, out), (p.stderr, err)):
                t = threading.Thread(target=_forward, args=(src, dst, pre, lock), daemon=True)
                t.start()
                self._threads.append(t)
        self.failed: tuple[int, int] | None = None  # (rank, exit code) of the first failure

    def wait(
        self, timeout: float | None = None, *, on_failure: Callable[[int, int], None] | None = None
    ) -> int:
        """Wait for all; stop the rest once one fails. Returns 0 or the first failing exit code.

        Raises:
          TimeoutError: ``timeout`` passed (the workers are stopped first).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            codes = [p.poll() for p in self.procs]
            bad = [(r, c) for r, c in zip(self.ranks, codes, strict=True) if c not in (None, 0)]
            if bad:
                self.failed = bad[0]
                if on_failure is not None:
                    on_failure(*bad[0])
                self.terminate()
                break
            if all(c == 0 for c in codes):
                break
            if deadline is not None and time.monotonic() > deadline:
                self.terminate()
                raise TimeoutError(f"workers still running after {timeout:g} s; stopped them")
            time.sleep(0.05)
        for t in self._threads:
            t.join(timeout=2.0)
        if self.failed is None:
            return 0
        code = self.failed[1]
        return code if code > 0 else 128 - code

    def terminate(self) -> None:
        """SIGTERM every running worker's process group, SIGKILL after a grace period."""
        for p in self.procs:
            if p.poll() is None:
                _signal_group(p, signal.SIGTERM)
        deadline = time.monotonic() + LAUNCH_KILL_GRACE_S
        while any(p.poll() is None for p in self.procs) and time.monotonic() < deadline:
            time.sleep(0.05)
        for p in self.procs:
            if p.poll() is None:
                _signal_group(p, signal.SIGKILL)
                p.wait()


def _signal_group(p: subprocess.Popen[str], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(p.pid, sig)


def worker_env(
    rank: int,
    local_rank: int,
    world_size: int,
    local_world_size: int,
    master_addr: str,
    master_port: int,
    extra: Mapping[str, str] | None = None,
    devices_per_worker: int | str | None = None,
) -> dict[str, str]:
    """This process's environment plus the rendezvous variables of one worker, and ``extra``.

    On a GPU host the worker also gets its own GPUs (``CUDA_VISIBLE_DEVICES``)
    by ``devices_per_worker`` (see ``runtime.placement``).

    Example:
      >>> env = worker_env(1, 1, 2, 2, "127.0.0.1", 29500)
      >>> env["RANK"], env["LOCAL_WORLD_SIZE"], env["MASTER_PORT"]
      ('1', '2', '29500')
    """
    env = dict(os.environ)
    env.update(
        RANK=str(rank),
        LOCAL_RANK=str(local_rank),
        WORLD_SIZE=str(world_size),
        LOCAL_WORLD_SIZE=str(local_world_size),
        MASTER_ADDR=master_addr,
        MASTER_PORT=str(master_port),
        PYTHONUNBUFFERED="1",
    )
    if extra:
        env.update(extra)
    env.update(worker_placement(local_rank, local_world_size, devices_per_worker, env))
    return env


class LocalWorkers:
    """Handle on workers started by ``spawn(..., join=False)``."""

    def __init__(
        self,
        group: WorkerProcesses,
        workdir: tempfile.TemporaryDirectory,
        blob: Path,
        master_addr: str,
        master_port: int,
    ) -> None:
        self._group, self._workdir, self._blob = group, workdir, blob
        self.master_addr, self.master_port = master_addr, master_port

    def join(self, timeout: float | None = None) -> list[Any]:
        """Wait for every worker; return their return values in rank order.

        Raises:
          RuntimeError: a worker failed (the others were stopped); its output was forwarded.
          TimeoutError: ``timeout`` passed (the workers were stopped).
        """
        try:
            code = self._group.wait(timeout)
            if code:
                rank, rc = self._group.failed or (-1, code)
                raise RuntimeError(
                    f"spawn: worker rank {rank} exited with code {rc}; stopped the other workers "
                    "(its traceback is in the output above)"
                )
            # A worker's main-script classes are ``__mp_main__``'s there: this process's main.
            sys.modules.setdefault("__mp_main__", sys.modules["__main__"])
            results = []
            for rank in self._group.ranks:
                with open(f"{self._blob}.{rank}.out", "rb") as f:
                    results.append(cloudpickle.load(f))
            return results
        finally:
            self._workdir.cleanup()

    def terminate(self) -> None:
        """Stop every worker now."""
        self._group.terminate()


def spawn(
    fn: Callable[..., Any],
    nprocs: int,
    args: Sequence[Any] = (),
    *,
    join: bool = True,
    world_size: int | None = None,
    rank_offset: int = 0,
    master_addr: str = "127.0.0.1",
    master_port: int | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    devices_per_worker: int | str | None = None,
) -> list[Any] | LocalWorkers:
    """Run ``fn(rank, *args)`` in ``nprocs`` new local processes (works from a notebook).

    As ``torch.multiprocessing.spawn``: each worker first imports this
    process's main script as ``__mp_main__`` (its top level runs there, its
    ``if __name__ == "__main__":`` block does not; ``sys.argv`` and
    ``sys.path`` are this process's), then calls ``fn``, found by name in that
    module. A function with no name there (a closure, one from a notebook or
    under the ``__main__`` guard) travels by value (cloudpickle), keeping its
    file name, so a worker's traceback shows the user's file and lines.
    Each process gets the RPC environment (RANK, WORLD_SIZE, MASTER_ADDR,
    MASTER_PORT, ...), so ``fn`` can call ``init_rpc(name, rank=rank,
    world_size=int(os.environ["WORLD_SIZE"]))`` (tensorplay's ``world_size=None`` is a
    dynamic group, whatever the environment says). Unless
    ``TENSORPLAY_JAX_RPC_SECRET`` (or ``..._SECRET_FILE``) is set, the job gets a
    fresh random secret; when this process joins the job (``world_size`` larger
    than ``nprocs``) it is also put in this process's environment. Unless
    ``JAX_COMPILATION_CACHE_DIR`` is set (or ``TENSORPLAY_JAX_JOB_COMPILATION_CACHE=0``),
    the workers share one JAX compilation cache, made by this process and removed
    when it exits: a program one worker (or an earlier ``spawn``) compiled is
    loaded, not compiled again (``runtime.compile_cache``).

    Args:
      fn: the worker body, called as ``fn(rank, *args)``.
      nprocs: processes to start.
      args: extra arguments for ``fn`` (pickled).
      join: wait and return the results; False returns a :class:`LocalWorkers`
        handle at once (e.g. to make this process another worker).
      world_size: total workers (default ``nprocs``; larger when this process
        joins too, with ``rank_offset`` skipping its rank).
      rank_offset: rank of the first started process.
      master_addr / master_port: rendezvous address (a free port by default);
        read it from the handle when ``join=False``.
      env: extra environment variables for the workers.
      timeout: seconds for ``join``.
      devices_per_worker: GPUs each worker gets on a GPU host (``"auto"``: one
        each; 0: every worker sees every GPU; see ``runtime.placement``); None:
        ``TENSORPLAY_JAX_DEVICES_PER_WORKER``, else auto.

    Returns:
      The return values in rank order, or a :class:`LocalWorkers` handle.

    Raises:
      RuntimeError: a worker failed (with ``join``), or this is a worker still
        importing the main script (a script that spawns at its top level, not
        under ``if __name__ == "__main__":``).

    Example:
      >>> def hello(rank):
      ...     return rank * 10
      >>> spawn(hello, 2, timeout=60)
      [0, 10]
    """
    check_not_importing_main("spawn")
    ws = world_size or nprocs + rank_offset
    port = master_port or free_port(master_addr)
    secret_env = launch_secret_env("spawn", multi_node=False)
    if ws > nprocs and SECRET_ENV in secret_env:
        # This process joins the job too (e.g. a notebook as rank 0): it needs the secret.
        os.environ[SECRET_ENV] = secret_env[SECRET_ENV]
    workdir = tempfile.TemporaryDirectory(prefix="tpj-spawn-")
    blob = Path(workdir.name) / "fn.pkl"
    main = main_script()
    with open(blob, "wb") as f:
        pickle.dump(main, f)
        pickler = MainByName if main["module"] or main["file"] else Pickler
        pickler(f).dump((fn, tuple(args)))
    ranks = [rank_offset + i for i in range(nprocs)]
    here = str(Path(__file__).resolve().parents[2])
    extra = {**secret_env, **job_cache_env("spawn", env), **(env or {})}
    extra["PYTHONPATH"] = os.pathsep.join(p for p in (here, settings.raw("PYTHONPATH")) if p)
    envs = [
        worker_env(r, i, ws, nprocs, master_addr, port, extra, devices_per_worker)
        for i, r in enumerate(ranks)
    ]
    cmds = [[sys.executable, "-c", BOOT, str(blob), str(r)] for r in ranks]
    group = WorkerProcesses(cmds, envs, ranks)
    handle = LocalWorkers(group, workdir, blob, master_addr, port)
    return handle.join(timeout) if join else handle


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs (an exited, not yet reaped "zombie" counts as dead).

    Example:
        >>> pid_alive(os.getpid())
        True
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except FileNotFoundError:
        return False
    except (OSError, IndexError):
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
