"""Worker code for the profiler tests: RPC targets, and a process-group job reporting its spans."""

from __future__ import annotations

import time

from tensorplay_jax import profiler
from tensorplay_jax.distributed import rpc
from tests._worker import report


# ----------------------------------------------------------------- RPC targets
def add(a: int, b: int) -> int:
    return a + b


def relay(to: str) -> int:
    """Served on one worker, calls another: a nested RPC."""
    time.sleep(0.002)
    return rpc.rpc_sync(to, add, args=(20, 22))


def fail() -> None:
    raise ValueError("fails on purpose")


def big(n: int) -> bytes:
    return b"x" * n


# ----------------------------------------------------------------- jobs
def collective_wait() -> None:
    """Rank 0 arrives 0.3 s late at an all_reduce; each rank reports its trace's spans of it."""
    import sys

    import numpy as np

    import tensorplay_jax.distributed as dist

    dist.init_process_group("gloo", timeout=60, engine=sys.argv[1])
    rank = dist.get_rank()
    x = np.full((256,), rank + 1.0, np.float32)
    dist.all_reduce(x)  # warm-up (compiles on the xla engine)
    dist.barrier()
    with profiler.trace() as t:
        if rank == 0:
            time.sleep(0.3)
        y = dist.all_reduce(x)
    spans = {e["name"]: e for e in t.document["traceEvents"] if e["ph"] == "X"}
    report(
        value=float(np.asarray(y)[0]),
        call=spans["pg.all_reduce"],
        wait=spans.get("wait all_reduce"),
    )
    dist.destroy_process_group()
