"""A job of real RPC worker processes that a test drives from its own process (rank 0).

:class:`Workers` starts N-1 processes that only run their RPC agent, joins the
job itself as rank 0, and lets the test run its own functions on any worker
(``run``, ``run_all``): a test-module function travels by reference (the
workers see the test process's ``sys.path``), a closure or lambda by value.
Every wait is bounded by ``timeout``; a remote error re-raises with the remote
traceback; a worker that died is reported with its exit code and its output.
``close`` always stops RPC here and kills every worker, and a worker whose
parent (the test process) dies exits on its own. The pytest fixtures
``dist_workers`` / ``dist_workers_module`` (the ``tensorplay_jax`` plugin) make
and close one.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tensorplay_jax import rpc
from tensorplay_jax.runtime.launch import (
    WorkerProcesses,
    free_port,
    launch_secret_env,
    worker_env,
)
from tensorplay_jax.runtime.settings import SECRET_ENV

__all__ = ["WorkerDied", "Workers"]

_START_S = 120.0  # start-up (imports, rendezvous) may take this long even with a short timeout
_CLOSE_GRACE_S = 10.0  # graceful RPC shutdown at close, before the workers are killed
_PARENT_POLL_S = 0.5

_BOOT = "from tensorplay_jax.testing.workers import serve; serve()"


class WorkerDied(RuntimeError):
    """A worker process of a :class:`Workers` job exited; the message holds its output."""


class _Lines:
    """A thread-safe text sink that keeps every line (the workers' forwarded output)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._parts: list[str] = []

    def write(self, text: str) -> int:
        with self._lock:
            self._parts.append(text)
        return len(text)

    def flush(self) -> None:
        pass

    def of(self, rank: int) -> str:
        prefix = f"[rank {rank}] "
        with self._lock:
            text = "".join(self._parts)
        return "".join(
            line[len(prefix) :] for line in text.splitlines(True) if line.startswith(prefix)
        )


class Workers:
    """N RPC workers for a test: this process is rank 0, the others are new processes.

    Args:
      n: workers in the job, this process included (at least 1).
      names: every worker's name, rank order (default ``worker0`` ... ``worker{n-1}``).
      timeout: seconds any one wait may take (each ``run``, ``kill``); also the
        job's default RPC timeout. Start-up may take ``max(timeout, 120)``
        seconds (new processes import JAX); shutdown at most 10 more.
      env: extra environment variables for the started workers.
      rpc_options: per worker name, more ``GrpcRpcBackendOptions`` fields as
        JSON values, e.g. ``{"worker1": {"device_maps": {"worker0": {"cpu:1": "cpu:2"}}}}``.
      devices_per_worker: GPUs each started worker gets on a GPU host, counted
        with this process as local rank 0 (see ``tensorplay_jax.runtime.placement``).

    Example:
      >>> w = Workers(3)
      >>> w.names
      ['worker0', 'worker1', 'worker2']
      >>> with Workers(2) as w:  # doctest: +SKIP
      ...     w.run("worker1", divmod, 7, 2)
      (3, 1)
    """

    def __init__(
        self,
        n: int = 2,
        *,
        names: Sequence[str] | None = None,
        timeout: float = 60.0,
        env: Mapping[str, str] | None = None,
        rpc_options: Mapping[str, Mapping[str, Any]] | None = None,
        devices_per_worker: int | str | None = None,
    ) -> None:
        if n < 1:
            raise ValueError(f"Workers: n={n} must be at least 1 (this process is rank 0)")
        self.names = list(names) if names is not None else [f"worker{r}" for r in range(n)]
        if len(self.names) != n:
            raise ValueError(f"Workers: names={self.names} has {len(self.names)} names, n={n}")
        if timeout <= 0:
            raise ValueError(f"Workers: timeout={timeout} must be > 0 seconds")
        self.timeout = float(timeout)
        self._env = dict(env or {})
        self._rpc_options = {k: dict(v) for k, v in (rpc_options or {}).items()}
        self._devices_per_worker = devices_per_worker
        for name in self._rpc_options:
            self._check_name(name)
        self._out, self._err = _Lines(), _Lines()
        self._group: WorkerProcesses | None = None
        self._killed: set[int] = set()
        self._started = False

    # ------------------------------------------------------------------ life cycle
    def start(self) -> Workers:
        """Start the workers and join the job as rank 0 (bounded: see the class)."""
        if rpc.is_initialized():
            raise RuntimeError(
                "Workers.start: RPC is already initialized in this process; use one "
                "dist_workers / dist_workers_module job per test (or call rpc.shutdown() first)"
            )
        n, port = len(self.names), free_port()
        secret = launch_secret_env("tensorplay_jax.testing", multi_node=False)
        extra = {
            **secret,
            **self._env,
            # the test process's imports resolve on the workers (test modules, rootdir)
            "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
        }
        ranks = list(range(1, n))
        per = self._devices_per_worker
        envs = [worker_env(r, r, n, n, "127.0.0.1", port, extra, per) for r in ranks]
        argv = [json.dumps(self.names), str(port), str(self.timeout), str(os.getpid())]
        argv.append(json.dumps(self._rpc_options))
        cmds = [[sys.executable, "-c", _BOOT, *argv, str(r)] for r in ranks]
        self._group = WorkerProcesses(cmds, envs, ranks, stdout=self._out, stderr=self._err)
        opts = rpc.GrpcRpcBackendOptions(
            init_method=f"tcp://127.0.0.1:{port}",
            rpc_timeout=self.timeout,
            init_timeout=max(self.timeout, _START_S),
            secret=secret.get(SECRET_ENV),
            **self._rpc_options.get(self.names[0], {}),
        )
        self._started = True
        try:
            rpc.init_rpc(self.names[0], rank=0, world_size=n, rpc_backend_options=opts)
        except BaseException as e:
            self._raise_if_dead(e)
            raise
        return self

    def close(self) -> None:
        """Shut RPC down here and stop every worker; always leaves nothing running.

        Raises:
          WorkerDied: a worker died that nobody killed on purpose (``kill``).
        """
        if not self._started:
            return
        self._started = False
        dead = self._dead()
        try:
            if rpc.is_initialized():
                with contextlib.suppress(Exception):
                    rpc.shutdown(graceful=not dead, timeout=_CLOSE_GRACE_S)
        finally:
            if self._group is not None:
                with contextlib.suppress(TimeoutError):
                    self._group.wait(timeout=_CLOSE_GRACE_S)
                self._group.terminate()
        # A worker exits 0 only once the job shut down gracefully (this process took part):
        # that is the end of the job, not a death.
        unexpected = [r for r, code in dead if r not in self._killed and code != 0]
        if unexpected:
            raise WorkerDied(self._report(unexpected[0], "died during the test"))

    def __enter__(self) -> Workers:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ running
    def run(
        self, name: str, fn: Callable[..., Any], *args: Any, timeout: float | None = None, **kw: Any
    ) -> Any:
        """``fn(*args, **kw)`` on worker ``name``; its result, or its error with the traceback.

        Raises:
          WorkerDied: the worker is dead (the message holds its exit code and output).
          Exception: whatever ``fn`` raised there (the remote traceback in the message).
        """
        self._check_name(name)
        try:
            return rpc.rpc_sync(name, fn, args=args, kwargs=kw, timeout=timeout or self.timeout)
        except Exception as e:
            self._raise_if_dead(e)
            raise

    def run_all(
        self, fn: Callable[..., Any], *args: Any, timeout: float | None = None, **kw: Any
    ) -> dict[str, Any]:
        """``fn(*args, **kw)`` on every worker at once (this one too); ``{name: result}``."""
        wait = timeout or self.timeout
        futs = {n: rpc.rpc_async(n, fn, args=args, kwargs=kw, timeout=wait) for n in self.names}
        try:
            return {n: f.wait(wait) for n, f in futs.items()}
        except Exception as e:
            self._raise_if_dead(e)
            raise

    def kill(self, name: str) -> None:
        """SIGKILL worker ``name`` (not rank 0) and wait, bounded, until it is gone."""
        rank = self._check_name(name)
        if rank == 0 or self._group is None:
            raise ValueError(f"Workers.kill: {name!r} is this process (rank 0)")
        proc = self._group.procs[rank - 1]
        self._killed.add(rank)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=self.timeout)

    def output(self, name: str) -> str:
        """What worker ``name`` printed so far (stdout, then stderr)."""
        rank = self._check_name(name)
        return self._out.of(rank) + self._err.of(rank)

    # ------------------------------------------------------------------ failures
    def _check_name(self, name: str) -> int:
        if name not in self.names:
            raise ValueError(f"Workers: no worker named {name!r}; the workers are {self.names}")
        return self.names.index(name)

    def _dead(self) -> list[tuple[int, int]]:
        if self._group is None:
            return []
        codes = [(r, p.poll()) for r, p in zip(self._group.ranks, self._group.procs, strict=True)]
        return [(r, c) for r, c in codes if c is not None]

    def _raise_if_dead(self, cause: BaseException) -> None:
        # A transport error (peer gone, timeout) often comes just before the exit shows.
        deadline = time.monotonic() + (1.0 if isinstance(cause, rpc.RpcError | OSError) else 0)
        while not self._dead() and time.monotonic() < deadline:
            time.sleep(0.05)
        dead = self._dead()
        if dead:
            raise WorkerDied(self._report(dead[0][0], f"failed: {cause}")) from cause

    def _report(self, rank: int, what: str) -> str:
        code = self._group.procs[rank - 1].poll() if self._group else None
        time.sleep(0.2)  # let the forwarding threads drain the last lines
        return (
            f"worker {self.names[rank]!r} (rank {rank}) exited with code {code}; {what}\n"
            f"--- its output ---\n{self.output(self.names[rank]) or '(none)'}"
        )


def _exit_with_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(_PARENT_POLL_S)
    os._exit(70)


def serve() -> None:
    """The body of a started worker: join the job, serve RPCs until rank 0 shuts down.

    Command line (from :meth:`Workers.start`): names as JSON, port, timeout, the
    parent's pid, the options per worker as JSON, rank. The worker exits on its
    own when its parent dies.
    """
    names, port, timeout, parent, options, rank = sys.argv[1:7]
    threading.Thread(target=_exit_with_parent, args=(int(parent),), daemon=True).start()
    all_names = json.loads(names)
    opts = rpc.GrpcRpcBackendOptions(
        init_method=f"tcp://127.0.0.1:{port}",
        rpc_timeout=float(timeout),
        init_timeout=max(float(timeout), _START_S),
        **json.loads(options).get(all_names[int(rank)], {}),
    )
    rpc.init_rpc(
        all_names[int(rank)], rank=int(rank), world_size=len(all_names), rpc_backend_options=opts
    )
    rpc.shutdown(graceful=True, timeout=0)
