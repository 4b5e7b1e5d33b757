"""RPC jobs whose rank 0 is the test process, so that the test itself calls and asserts.

- :func:`rpc_job`: a :class:`tensorplay_jax.testing.Workers` job (``w0`` is this
  process, ``w1`` ... serve RPCs) on one transport;
- :class:`Peers`: ranks 1..n-1 run a worker function of their own (e.g. one that
  patches the agent before it starts) while this process joins as ``w0``.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator, Mapping

from tensorplay_jax import rpc
from tensorplay_jax.runtime.settings import LOG_CALL_ERRORS_ENV
from tensorplay_jax.testing import Workers
from tests._procs import WorkerResult, free_port, run_workers
from tests.rpc import _transports as T


@contextlib.contextmanager
def environ(env: Mapping[str, str]) -> Iterator[None]:
    """``env`` set in this process's environment for the ``with`` block."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def worker_tracebacks(w: Workers) -> dict[str, str]:
    """Each started worker's output, where it holds a traceback."""
    outs = {name: w.output(name) for name in w.names[1:]}
    return {name: out for name, out in outs.items() if "Traceback" in out}


@contextlib.contextmanager
def rpc_job(
    n: int,
    transport: str = "local",
    *,
    timeout: float = 60.0,
    env: Mapping[str, str] | None = None,
    rpc_options: Mapping[str, Mapping[str, object]] | None = None,
) -> Iterator[Workers]:
    """A job of ``n`` workers ``w0`` (this process) ... ``w{n-1}`` on ``transport``.

    ``rpc_options``: more options per worker name (see ``Workers``).

    At the end (``Workers.close``: a graceful shutdown) no worker may have printed a
    traceback (the callees' reports of the errors calls raise are off). A test that
    checks shutdown itself uses :class:`Peers`: ``close`` after
    the test's own ``rpc.shutdown()`` reports the workers that exited as dead.
    """
    # The targets raise on purpose: a callee's report of a call's error on its stderr
    # (a traceback, as tensorplay prints) is no crash; tests/rpc/test_errors.py checks it.
    full = T.env_of(transport, **{LOG_CALL_ERRORS_ENV: "0", **(env or {})})
    names = [f"w{r}" for r in range(n)]
    with (
        environ(full),
        Workers(n, names=names, timeout=timeout, env=full, rpc_options=rpc_options) as w,
    ):
        yield w
    assert not rpc.is_initialized()
    assert not worker_tracebacks(w), worker_tracebacks(w)


class Peers:
    """Ranks 1..n-1 of a job running ``target`` (``tests._procs.run_workers``) in a thread.

    This process joins as rank 0 with :meth:`options`; leaving the ``with`` block
    waits for the peers and raises what failed there (``results`` then holds their
    outputs, rank 1 first).
    """

    def __init__(
        self,
        target: Callable[[], object],
        world_size: int,
        *,
        env: Mapping[str, str] | None = None,
        timeout: float = 120.0,
    ) -> None:
        self.port = free_port()
        self.timeout = timeout
        self.results: list[WorkerResult] = []
        self._error: BaseException | None = None
        ranks = range(1, world_size)
        kwargs = dict(
            env={**(env or {}), "WORLD_SIZE": str(world_size)},
            per_rank_env=[{"RANK": str(r), "LOCAL_RANK": str(r)} for r in ranks],
            timeout=timeout,
            master_port=self.port,
        )
        self._thread = threading.Thread(
            target=self._run, args=(target, world_size - 1, kwargs), daemon=True
        )

    def _run(self, target: Callable[[], object], n: int, kwargs: dict) -> None:
        try:
            self.results = run_workers(target, n, **kwargs)
        except BaseException as e:  # re-raised in the test's thread by __exit__
            self._error = e

    def options(self, **kw: object) -> rpc.GrpcRpcBackendOptions:
        """Rank 0's options: the peers' rendezvous address, and ``kw``."""
        return rpc.GrpcRpcBackendOptions(init_method=f"tcp://127.0.0.1:{self.port}", **kw)

    def __enter__(self) -> Peers:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._thread.join(self.timeout + 10)
        assert not self._thread.is_alive(), "the peers did not finish"
        if self._error is not None:
            raise self._error
