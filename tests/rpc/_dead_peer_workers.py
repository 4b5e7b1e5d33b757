"""Worker code for test_dead_peer: a trainer SIGKILLed in the middle of training steps.

Three workers: ``w0`` and ``w2`` own a layer each (RemoteModule), the trainer
(rank ``TPJ_VICTIM``) runs distributed-autograd steps with a
``DistributedOptimizer`` and SIGKILLs itself ``TPJ_KILL_S`` seconds in, from a
thread, whatever the step is doing then. The survivors wait until it is gone,
then time their default ``rpc.shutdown()`` and print ``RESULT {json}``.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time

from tensorplay_jax.distributed import rpc
from tests.security._common import wait_until

READY_S = 60.0


def _marker(name: str) -> str:
    return os.path.join(os.environ["TPJ_TMP"], name)


def _train(owners: list[str]) -> None:
    import optax

    import tensorplay_jax as tp
    import tensorplay_jax.distributed.autograd as dist_autograd
    from tensorplay_jax.distributed.nn import RemoteModule
    from tensorplay_jax.distributed.optim import DistributedOptimizer

    x = tp.randn(6, 4)
    m1 = RemoteModule(owners[0], tp.nn.Linear, (4, 3))
    m2 = RemoteModule(owners[1], tp.nn.Linear, (3, 2))
    opt = DistributedOptimizer(optax.adam(1e-3), m1.remote_parameters() + m2.remote_parameters())
    with dist_autograd.context() as ctx:  # the first step compiles: the kill comes later
        dist_autograd.backward(ctx, [m2(m1(x).tanh()).sum()])
        opt.step(ctx)
    open(_marker("training"), "w").close()
    kill_s = float(os.environ["TPJ_KILL_S"])
    threading.Timer(kill_s, os.kill, (os.getpid(), signal.SIGKILL)).start()
    while True:
        with dist_autograd.context() as ctx:
            out = m2(m1(x).tanh())
            dist_autograd.backward(ctx, [(out * out).sum()])
            opt.step(ctx)


def trainer_killed_mid_step() -> None:
    rank, ws = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    victim = int(os.environ["TPJ_VICTIM"])
    rpc.init_rpc(f"w{rank}", rank=rank, world_size=ws)
    if rank == victim:
        _train([f"w{r}" for r in range(ws) if r != victim])
        return
    wait_until(lambda: os.path.exists(_marker("training")), READY_S, "the trainer training")
    # The trainer is gone once its pid is (it wrote nothing else): poll the store's view
    # by pinging it until the ping fails.
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        try:
            rpc.rpc_sync(f"w{victim}", os.getpid, timeout=2)
        except Exception:
            break
        time.sleep(0.05)
    t0 = time.monotonic()
    err = None
    try:
        rpc.shutdown()
    except Exception as e:
        err = f"{type(e).__name__}: {e}"
    print(
        "RESULT "
        + json.dumps({"rank": rank, "shutdown_s": round(time.monotonic() - t0, 3), "error": err}),
        flush=True,
    )
