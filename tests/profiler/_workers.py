"""Worker code for the profiler tests: each job function runs in every rank; RPC targets too."""

from __future__ import annotations

import os
import signal
import threading
import time

import optax

import tensorplay_jax as tp
import tensorplay_jax.distributed.autograd as dist_autograd
from tensorplay_jax import profiler
from tensorplay_jax.distributed import rpc
from tensorplay_jax.distributed.nn import RemoteModule
from tensorplay_jax.distributed.optim import DistributedOptimizer
from tests._worker import expect, init_rpc, rank_and_world_size


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


def die_soon(delay: float) -> None:
    threading.Timer(delay, os.kill, args=(os.getpid(), signal.SIGKILL)).start()


# ----------------------------------------------------------------- jobs
def step_trace() -> None:
    """Rank 0 traces a nested RPC, remote/to_here/delete, a backward and an optimizer step."""
    rank = rank_and_world_size()[0]
    init_rpc()
    if rank == 0:
        tp.manual_seed(0)
        model = RemoteModule("w1", tp.nn.Linear, (4, 3))
        opt = DistributedOptimizer(optax.sgd(0.1), model.remote_parameters())
        x = tp.randn(2, 4)
        with profiler.trace(os.environ["TPJ_TRACE"], timeout=20) as t:
            with profiler.record_function("step", n=1):
                assert rpc.rpc_sync("w1", relay, args=("w2",)) == 42
                assert len(rpc.rpc_sync("w2", big, args=(100_000,))) == 100_000
                expect(ValueError, ["fails on purpose"], rpc.rpc_sync, "w1", fail)
                expect(Exception, [], rpc.rpc_sync, "w1", add, args=(threading.Lock(), 1))
                ref = rpc.remote("w2", add, args=(1, 2))
                assert ref.to_here() == 3
                del ref
                with dist_autograd.context() as ctx:
                    dist_autograd.backward(ctx, [model(x).sum()])
                    opt.step(ctx)
            time.sleep(0.3)  # the RRef delete reaches w2 and is served while recording
        print(t.summary().table(top=12))
        assert not t.missing, t.missing
        print("TRACE-OK")
    rpc.shutdown()


def killed_mid_trace() -> None:
    """Rank 2 is killed while rank 0 traces: the file still holds w0's and w1's events."""
    rank = rank_and_world_size()[0]
    init_rpc(rpc_backend_options=rpc.GrpcRpcBackendOptions(rpc_timeout=10))
    if rank == 0:
        with profiler.trace(os.environ["TPJ_TRACE"], timeout=5) as t:
            assert rpc.rpc_sync("w1", add, args=(1, 1)) == 2
            assert rpc.rpc_sync("w2", add, args=(2, 2)) == 4
            rpc.rpc_sync("w2", die_soon, args=(0.2,))
            time.sleep(1.0)
            expect(Exception, ["w2"], rpc.rpc_sync, "w2", add, args=(1, 1), timeout=3)
            assert rpc.rpc_sync("w1", add, args=(3, 3)) == 6
        assert set(t.missing) == {"w2"}, t.missing
        print("KILLED-OK")
    if rank == 2:
        time.sleep(60)  # killed by die_soon
    rpc.shutdown()
    print("DONE", rank)


def collective_wait() -> None:
    """Rank 0 arrives 0.3 s late at an all_reduce: rank 1's trace shows the wait inside it."""
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
    assert np.asarray(y)[0] == 3.0
    doc = t.document
    spans = {e["name"]: e for e in doc["traceEvents"] if e["ph"] == "X"}
    call = spans["pg.all_reduce"]
    assert call["args"]["bytes"] == 1024 and call["args"]["shape"] == [256], call
    if rank == 1:
        wait = spans["wait all_reduce"]
        assert wait["dur"] >= 0.2e6, wait  # µs: it waited for rank 0
        assert call["ts"] <= wait["ts"] and wait["ts"] + wait["dur"] <= call["ts"] + call["dur"]
        assert call["dur"] - wait["dur"] < 0.2e6  # the transfer itself is short
    print("PG-TRACE-OK", rank)
    dist.destroy_process_group()
