"""Demo: a parameter server and two trainers on this machine, trained on scikit-learn's digits.

This process is the parameter server ``ps`` (rank 0); it starts two trainer
processes with ``rpc.spawn``. The model lives on the server as a
``RemoteModule``; a ``DistributedOptimizer`` (SGD with momentum) keeps its
state there. Each trainer runs, per batch, the forward over RPC, the loss
locally, ``dist_autograd.backward`` and ``DistributedOptimizer.step``.
Training is synchronous by default: the trainers take turns, one batch at a
time, so every gradient is computed on the parameters every earlier step
produced. That makes the run reproducible, and the demo checks it:
single-process training (plain tape + optax) from the same start on the same
batches must end at the same parameters. ``asynchronous=True`` lets the
trainers run at once (Hogwild-style: a gradient may be computed on parameters
another trainer is about to update; the server applies steps one at a time);
it reports accuracy only.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import numpy as np
import optax

import tensorplay_jax as tp
from tensorplay_jax.demo import _data
from tensorplay_jax.demo._model import DigitsNet, train_locally
from tensorplay_jax.nn import functional as F

__all__ = ["run"]

PS = "ps"
TRAINERS = 2
PARITY_ATOL = 1e-5


class _Turns:
    """On the server: lets step k start only after step k-1 finished; drives the progress bar."""

    def __init__(self, total: int, ordered: bool) -> None:
        from tqdm import tqdm

        self.ordered = ordered
        self.done = 0
        self.cond = threading.Condition()
        self.bar = tqdm(total=total, desc="training", unit="batch", ncols=90)
        self.avg: float | None = None
        self.losses: list[float] = []

    def wait(self, step: int) -> None:
        if not self.ordered:
            return
        with self.cond:
            if not self.cond.wait_for(lambda: self.done == step, timeout=120):
                raise TimeoutError(f"step {step} never got its turn (done={self.done})")

    def finish(self, step: int, loss: float) -> None:
        with self.cond:
            assert step == self.done or not self.ordered, (step, self.done)
            self.done += 1
            self.losses.append(loss)
            self.avg = loss if self.avg is None else 0.9 * self.avg + 0.1 * loss
            self.bar.set_postfix(loss=f"{self.avg:.3f}", refresh=False)
            self.bar.update(1)
            self.cond.notify_all()


_turns: _Turns | None = None


def wait_turn(step: int) -> None:
    """Runs on the server: block until it is ``step``'s turn."""
    assert _turns is not None
    _turns.wait(step)


def finished(step: int, loss: float) -> None:
    """Runs on the server: ``step`` is done (its update applied) with this loss."""
    assert _turns is not None
    _turns.finish(step, loss)


def train(model: Any, opt: Any, steps: list[tuple[int, np.ndarray]], seed: int) -> int:
    """Runs on a trainer: its share of the batches, each with forward, backward and step."""
    from tensorplay_jax.distributed import autograd as dist_autograd
    from tensorplay_jax.distributed import rpc

    data = _data.load(seed=seed)
    for step, idx in steps:
        rpc.rpc_sync(PS, wait_turn, args=(step,), timeout=0)
        with dist_autograd.context() as ctx:
            logits = model(tp.tensor(data.x_train[idx]))  # runs on the server
            loss = F.cross_entropy(logits, tp.tensor(data.y_train[idx]))
            dist_autograd.backward(ctx, [loss])  # gradients land on the server
            opt.step(ctx)  # the server updates its parameters
        rpc.rpc_sync(PS, finished, args=(step, float(loss.item())))
    return len(steps)


def _parity(
    initial: dict[str, np.ndarray],
    final: dict[str, np.ndarray],
    ref: dict[str, np.ndarray],
    steps: int,
) -> bool:
    """Print and return whether the server's parameters equal single-process training's."""
    diff = max(float(np.abs(final[k] - ref[k]).max()) for k in final)
    moved = max(float(np.abs(final[k] - initial[k]).max()) for k in final)
    ok = diff <= PARITY_ATOL and moved > 10 * PARITY_ATOL
    print(
        f"parity: synchronous parameter-server training vs single-process training on the "
        f"same {steps} batches: max |difference| = {diff:.2e} over "
        f"{sum(v.size for v in final.values())} parameters (tolerance {PARITY_ATOL:g}; "
        f"largest change from the start {moved:.2f}) "
        f"[{'same parameters' if ok else 'MISMATCH'}]"
    )
    return ok


def trainer_main(rank: int) -> None:
    """A trainer process: join the job and serve the server's calls until it shuts down."""
    from tensorplay_jax.distributed import rpc

    rpc.init_rpc(f"trainer{rank}", rank=rank, world_size=TRAINERS + 1)
    rpc.shutdown()


def run(
    epochs: int = 12,
    batch_size: int = 32,
    lr: float = 0.05,
    hidden: int = 64,
    seed: int = 0,
    asynchronous: bool = False,
    profile: str | None = None,
) -> bool:
    """Train on the digits with a parameter server and two trainers; True if the parity check holds.

    Args:
      epochs: passes over the training set.
      batch_size: examples per step.
      lr: SGD learning rate (momentum 0.9).
      hidden: hidden units of the two-layer model.
      seed: data split, batch order and initialisation.
      asynchronous: let the trainers run at once (no parity check then).
      profile: record the training on every worker into this Chrome-trace / Perfetto
        file (``tensorplay_jax.profiler``) and print its summary table.
    """
    global _turns
    from tensorplay_jax import profiler
    from tensorplay_jax.distributed import rpc
    from tensorplay_jax.distributed.nn import RemoteModule
    from tensorplay_jax.distributed.optim import DistributedOptimizer

    t0 = time.perf_counter()
    data = _data.load(seed=seed)
    batches = _data.epoch_batches(len(data.x_train), batch_size, epochs, seed)
    world = TRAINERS + 1
    workers = rpc.spawn(
        trainer_main,
        TRAINERS,
        join=False,
        world_size=world,
        rank_offset=1,
        env={"JAX_PLATFORMS": "cpu"},
    )
    opts = rpc.GrpcRpcBackendOptions(
        init_method=f"tcp://{workers.master_addr}:{workers.master_port}"
    )
    try:
        rpc.init_rpc(PS, rank=0, world_size=world, rpc_backend_options=opts)
        print(
            f"Parameter server '{PS}' and {TRAINERS} trainers; digits: {len(data.x_train)} train / "
            f"{len(data.x_test)} test images; {epochs} epochs of {len(batches) // epochs} batches "
            f"of {batch_size}; SGD(lr={lr}, momentum=0.9); model 64-{hidden}-10 on '{PS}'; "
            f"{'asynchronous' if asynchronous else 'synchronous'} updates."
        )
        tp.manual_seed(seed)
        model = RemoteModule(f"{PS}/cpu", DigitsNet, kwargs={"hidden": hidden})
        module = model.get_module_rref().local_value()  # this process is the server
        initial = {k: np.asarray(v.value).copy() for k, v in module.state_dict().items()}
        tx = optax.sgd(lr, momentum=0.9)
        opt = DistributedOptimizer(tx, model.remote_parameters())

        _turns = _Turns(len(batches), ordered=not asynchronous)
        t_train = time.perf_counter()
        with profiler.trace(profile) if profile else contextlib.nullcontext() as tr:
            futs = []
            for t in range(TRAINERS):
                mine = [(k, b) for k, b in enumerate(batches) if k % TRAINERS == t]
                futs.append(
                    rpc.rpc_async(
                        f"trainer{t + 1}", train, args=(model, opt, mine, seed), timeout=0
                    )
                )
            rpc.wait_all(futs)
        _turns.bar.close()
        train_s = time.perf_counter() - t_train
        if tr is not None:
            print(tr.summary().table(top=15))
            print(f"trace of every worker written to {profile} (open it in ui.perfetto.dev)")

        with tp.no_grad():
            logits = model(tp.tensor(data.x_test))
        acc = float((np.asarray(logits.value).argmax(1) == data.y_test).mean())
        final = {k: np.asarray(v.value) for k, v in module.state_dict().items()}
        print(
            f"trained {len(batches)} steps in {train_s:.1f} s "
            f"({1000 * train_s / len(batches):.1f} ms/step); final loss "
            f"{np.mean(_turns.losses[-20:]):.4f} (mean of last 20)"
        )
        n_right = int((np.asarray(logits.value).argmax(1) == data.y_test).sum())
        print(f"test accuracy: {acc:.2%} ({n_right}/{len(data.y_test)})")
        if asynchronous:
            print("parity check skipped: asynchronous updates have no fixed order")
            ok = bool(np.mean(_turns.losses[-20:]) < np.mean(_turns.losses[:20]))
        else:
            ref = train_locally(initial, tx, data.x_train, data.y_train, batches, hidden)
            ok = _parity(initial, final, ref, len(batches))
        rpc.shutdown()
        workers.join(timeout=60)
        print(f"done in {time.perf_counter() - t0:.1f} s")
        return ok
    except BaseException:
        workers.terminate()
        raise
