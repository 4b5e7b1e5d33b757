"""Worker code for test_dead_peer: a worker SIGKILLed while the others work for it.

Three workers; the victim is rank ``TPJ_VICTIM``. The survivors wait until it
is gone, then time their default ``rpc.shutdown()`` and print ``RESULT {json}``.

- :func:`trainer_killed_mid_step`: the others own a layer each (RemoteModule);
  the victim trains with distributed autograd and a ``DistributedOptimizer`` and
  SIGKILLs itself ``TPJ_KILL_S`` seconds in, from a thread, whatever the step
  is doing then.
- :func:`caller_killed_while_served`: the victim sends ``w2`` more long calls
  (``block``) than ``w2`` has worker threads, then SIGKILLs itself while they run.
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


BLOCK_S = 40.0  # how long each of the dead caller's calls runs on w2
POOL = 4  # w2's worker threads
CALLS = 2 * POOL


def block(s: float) -> float:
    time.sleep(s)
    return s


def _flood() -> None:
    futs = [rpc.rpc_async("w2", block, args=(BLOCK_S,), timeout=0) for _ in range(CALLS)]
    time.sleep(1.0)  # they are being served (or queued for w2's pool)
    open(_marker("training"), "w").close()
    os.kill(os.getpid(), signal.SIGKILL)
    del futs


def caller_killed_while_served() -> None:
    rank, ws = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    opts = rpc.GrpcRpcBackendOptions(num_worker_threads=POOL if rank == 2 else 16)
    rpc.init_rpc(f"w{rank}", rank=rank, world_size=ws, rpc_backend_options=opts)
    if rank == int(os.environ["TPJ_VICTIM"]):
        _flood()
    _survive(rank)


def trainer_killed_mid_step() -> None:
    rank, ws = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    rpc.init_rpc(f"w{rank}", rank=rank, world_size=ws)
    if rank == int(os.environ["TPJ_VICTIM"]):
        _train([f"w{r}" for r in range(ws) if r != rank])
    _survive(rank)


def _survive(rank: int) -> None:
    victim = int(os.environ["TPJ_VICTIM"])
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
