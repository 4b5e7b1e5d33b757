"""Pipeline parallelism over two workers: a model in two shards, micro-batches through RRefs.

The shape of tensorplay's distributed pipeline example: the master holds RRefs
to two shards (``worker1``, ``worker2``). Each forward splits the batch into
micro-batches; for each, shard 1 runs on worker1 and keeps its output there
(an RRef), and shard 2 fetches it and runs on worker2, so worker1 computes
micro-batch k+1 while worker2 computes micro-batch k. Training
uses distributed autograd and a DistributedOptimizer over both shards.

Run (3 processes: master, worker1, worker2)::

    python -m tensorplay_jax.run --nproc 3 examples/pipeline_parallel.py --steps 40

Exits non-zero if the pipelined forward differs from the unsplit model or the
loss does not fall.
"""

from __future__ import annotations

import argparse
import os
import threading

import numpy as np
import optax

import tensorplay_jax as tp
import tensorplay_jax.distributed.autograd as dist_autograd
from tensorplay_jax.distributed import rpc
from tensorplay_jax.distributed.optim import DistributedOptimizer
from tensorplay_jax.nn import functional as F


class Shard(tp.nn.Module):
    """One pipeline stage; a lock keeps it to one micro-batch at a time."""

    def __init__(self, *layers: tp.nn.Module) -> None:
        super().__init__()
        self.net = tp.nn.Sequential(*layers)
        self._lock = threading.Lock()

    def forward(self, x_rref: rpc.RRef) -> tp.Tensor:
        x = x_rref.to_here()
        with self._lock:
            return self.net(x)

    def parameter_rrefs(self) -> list[rpc.RRef]:
        return [rpc.RRef(p) for p in self.parameters()]


def make_shard1(d_in: int, hidden: int, seed: int) -> Shard:
    tp.manual_seed(seed)
    return Shard(
        tp.nn.Linear(d_in, hidden), tp.nn.ReLU(), tp.nn.Linear(hidden, hidden), tp.nn.ReLU()
    )


def make_shard2(hidden: int, classes: int, seed: int) -> Shard:
    tp.manual_seed(seed + 1)
    return Shard(tp.nn.Linear(hidden, classes))


def run_stage(shard_rref: rpc.RRef, x_rref: rpc.RRef) -> rpc.RRef:
    """On a stage's worker: run the shard, keep the output here, return an RRef to it."""
    return rpc.RRef(shard_rref.local_value()(x_rref))


class DistNet(tp.nn.Module):
    """The master's view: two remote shards, fed micro-batch by micro-batch."""

    def __init__(self, micro_batch: int, d_in: int, hidden: int, classes: int, seed: int) -> None:
        super().__init__()
        self.micro_batch = micro_batch
        self.p1_rref = rpc.remote("worker1", make_shard1, args=(d_in, hidden, seed))
        self.p2_rref = rpc.remote("worker2", make_shard2, args=(hidden, classes, seed))

    def forward(self, xs: tp.Tensor) -> tp.Tensor:
        # Stage 1 of every micro-batch is queued on worker1 at once; each answers with an
        # RRef to its output, which stays on worker1. As each arrives, stage 2 of that
        # micro-batch starts on worker2 (which fetches the output from worker1), while
        # worker1 goes on with the next micro-batch.
        stage1 = [
            rpc.rpc_async("worker1", run_stage, args=(self.p1_rref, rpc.RRef(x)))
            for x in tp.split(xs, self.micro_batch, dim=0)
        ]
        stage2 = [self.p2_rref.rpc_async().forward(y.wait()) for y in stage1]
        return tp.cat(rpc.wait_all(stage2))

    def parameter_rrefs(self) -> list[rpc.RRef]:
        return self.p1_rref.rpc_sync().parameter_rrefs() + self.p2_rref.rpc_sync().parameter_rrefs()


def unsplit_forward(model: DistNet, x: tp.Tensor, args: argparse.Namespace) -> tp.Tensor:
    """The same model in one piece here (the shards' weights copied): the pipeline must agree."""
    local1 = make_shard1(args.d_in, args.hidden, args.seed)
    local2 = make_shard2(args.hidden, args.classes, args.seed)
    local1.load_state_dict(model.p1_rref.rpc_sync().state_dict())
    local2.load_state_dict(model.p2_rref.rpc_sync().state_dict())
    return local2.net(local1.net(x))


def synthetic_data(n: int, d_in: int, classes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Inputs and labels from a fixed random linear teacher."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d_in)).astype(np.float32)
    teacher = rng.normal(size=(d_in, classes)).astype(np.float32)
    return x, (x @ teacher).argmax(1).astype(np.int32)


def master(args: argparse.Namespace) -> dict[str, bool]:
    model = DistNet(args.micro_batch, args.d_in, args.hidden, args.classes, args.seed)
    x, y = synthetic_data(args.batch * 8, args.d_in, args.classes, args.seed)
    probe = tp.tensor(x[: args.batch])
    with tp.no_grad():
        same = np.allclose(
            model(probe).numpy(), unsplit_forward(model, probe, args).numpy(), rtol=1e-5, atol=1e-5
        )
    opt = DistributedOptimizer(optax.sgd(args.lr, momentum=0.9), model.parameter_rrefs())
    before = [_snapshot(r) for r in (model.p1_rref, model.p2_rref)]
    losses = []
    for step in range(args.steps):
        lo = (step * args.batch) % len(x)
        xb, yb = tp.tensor(x[lo : lo + args.batch]), tp.tensor(y[lo : lo + args.batch])
        with dist_autograd.context() as ctx:
            loss = F.cross_entropy(model(xb), yb)
            dist_autograd.backward(ctx, [loss])
            opt.step(ctx)
        losses.append(loss.item())
        if step % 10 == 0 or step == args.steps - 1:
            print(f"step {step:3d}  loss {losses[-1]:.4f}", flush=True)
    first, last = np.mean(losses[:3]), np.mean(losses[-3:])
    print(f"loss {first:.4f} -> {last:.4f}", flush=True)
    after = [_snapshot(r) for r in (model.p1_rref, model.p2_rref)]
    trained = [
        any(not np.array_equal(b[k], a[k]) for k in b) for b, a in zip(before, after, strict=True)
    ]
    checks = {
        "pipelined forward matches the unsplit model": bool(same),
        "the loss fell": bool(last < first),
        "both shards trained": all(trained),
    }
    for name, ok in checks.items():
        print(f"{name}: {ok}", flush=True)
    return checks


def _snapshot(shard_rref: rpc.RRef) -> dict[str, np.ndarray]:
    return {k: v.numpy() for k, v in shard_rref.rpc_sync().state_dict().items()}


def run(argv: list[str] | None = None) -> dict[str, bool]:
    """Start this rank, train (rank 0, the master), stop; the master's named checks.

    ``argv``: the command-line arguments (default ``sys.argv[1:]``); the other ranks
    return no checks.
    """
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--micro-batch", type=int, default=16)
    p.add_argument("--d-in", type=int, default=32)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--classes", type=int, default=4)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    rank = int(os.environ["RANK"])
    rpc.init_rpc("master" if rank == 0 else f"worker{rank}", rank=rank, world_size=3)
    checks = master(args) if rank == 0 else {}
    rpc.shutdown()
    return checks


def main() -> int:
    return 0 if all(run().values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
