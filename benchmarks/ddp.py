"""DistributedDataParallel: tensorplay_jax's beside torch's (gloo), step time.

A 4-layer MLP of 16 MiB of float32 parameters (four 1024 x 1024 Linear layers,
ReLU between), a batch of 64 per rank, MSE loss, SGD: one step is ``zero_grad``,
forward, backward (the gradients all-reduced in buckets during it), ``step``. On
2 and 4 local processes; each process runs both libraries in the same run, their
rounds interleaved (ours, torch, ours, torch, ...) so that a change in the
machine's load falls on both alike. A round times ``--steps`` steps after one
untimed; a round lasts as long as its slowest rank; the table shows the median
round's time per step and torch's time / ours (>= 1.0: ours is at least as fast).

Ours runs on the default engine (``shm`` on one host); torch's DDP on gloo with its
default bucket size (25 MiB, first bucket 1 MiB), as ours.

``--zero per-param`` (or ``bucket``) steps with ``ZeroRedundancyOptimizer(Adam)`` on both
libraries instead of SGD (``parameters_as_bucket_view`` False or True): each rank steps
its share of the four layers and broadcasts it.

``--hook allreduce`` (or ``noop``, ``fp16``, ``powersgd``) registers a communication
hook on both libraries: ``allreduce_hook`` (what DDP does without a hook), ``noop_hook``
(no communication: the step's floor), ``fp16_compress_hook``, or ``powerSGD_hook`` at
rank 4 (``start_powerSGD_iter=2``; the untimed steps before the rounds include the
first compressed one, which compiles ours). With PowerSGD the whole model is one
bucket (``bucket_cap_mb=64``; ``--bucket-cap-mb`` sets both libraries' cap in any
mode): torch 2.13's PowerSGD on gloo fails with more than one bucket (the ranks issue
the buckets' all-reduces in different orders).

``--only ours`` skips torch (it is chosen by itself when torch is not importable).
``--trace PATH`` runs one more step of ours on every rank with the profiler on and
writes rank 0's trace (``tensorplay_jax.profiler``: open it in
https://ui.perfetto.dev): the ``ddp.bucket`` spans on the ``ddp-comm`` thread (each
bucket's all-reduce, with its ``pg.all_reduce``) start while the main thread's
``backward`` span is still open; ``ddp.wait`` inside it is the end of the backward
pass waiting for the buckets.

Usage::

    python benchmarks/ddp.py                      # 2 and 4 ranks, 5 rounds of 10 steps
    python benchmarks/ddp.py --nprocs 2 --rounds 1 --steps 2 --trace /tmp/ddp.json
    PYTHONPATH=/tmp/torchlib python benchmarks/ddp.py --zero per-param  # ZeRO(Adam) steps
    PYTHONPATH=/tmp/torchlib python benchmarks/ddp.py --hook powersgd   # PowerSGD rank 4
    PYTHONPATH=/tmp/torchlib python benchmarks/ddp.py --only both
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WIDTH, LAYERS, BATCH, LR = 1024, 4, 64, 0.01  # 4 x 1024 x 1024 x 4 B = 16 MiB of weights
TIMEOUT_S = 1800.0
POWER_SGD = {"matrix_approximation_rank": 4, "start_powerSGD_iter": 2}
HOOK_BUCKET_MB = 64  # with PowerSGD: the whole model in one bucket


def _register(model, hooks, hook: str | None) -> None:
    """``hook`` on ``model`` from ``hooks`` (a library's ``ddp_comm_hooks`` package)."""
    if hook == "allreduce":
        model.register_comm_hook(None, hooks.default_hooks.allreduce_hook)
    elif hook == "noop":
        model.register_comm_hook(None, hooks.debugging_hooks.noop_hook)
    elif hook == "fp16":
        model.register_comm_hook(None, hooks.default_hooks.fp16_compress_hook)
    elif hook == "powersgd":
        state = hooks.powerSGD_hook.PowerSGDState(None, **POWER_SGD)
        model.register_comm_hook(state, hooks.powerSGD_hook.powerSGD_hook)


def _free_port() -> int:
    """A port free now, with the two above it (ours: MASTER_PORT and the next; torch: +2)."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + 2 < 65536 and all(_is_free(port + k) for k in (1, 2)):
            return port
    raise SystemExit("no three consecutive free ports")


def _is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


# ------------------------------------------------------------------ one rank
def _ours(rank: int, zero: str | None, hook: str | None, cap: float | None):
    """Our model, DDP, optimizer and one step (returns a callable step)."""
    import numpy as np

    import tensorplay_jax as tp
    from tensorplay_jax.distributed.algorithms import ddp_comm_hooks
    from tensorplay_jax.nn.parallel import DistributedDataParallel as DDP
    from tensorplay_jax.profiler import record_function

    tp.manual_seed(0)
    layers = []
    for i in range(LAYERS):
        layers.append(tp.nn.Linear(WIDTH, WIDTH))
        if i < LAYERS - 1:
            layers.append(tp.nn.ReLU())
    model = DDP(tp.nn.Sequential(*layers), bucket_cap_mb=cap)
    _register(model, ddp_comm_hooks, hook)
    if zero:
        from tensorplay_jax.distributed.optim import ZeroRedundancyOptimizer

        opt = ZeroRedundancyOptimizer(
            model.parameters(),
            optimizer_class=tp.optim.Adam,
            parameters_as_bucket_view=zero == "bucket",
            lr=LR,
        )
    else:
        opt = tp.optim.SGD(model.parameters(), lr=LR)
    rs = np.random.RandomState(rank)
    x = tp.tensor(rs.randn(BATCH, WIDTH).astype(np.float32))
    y = tp.tensor(rs.randn(BATCH, WIDTH).astype(np.float32))
    loss_fn = tp.nn.MSELoss()
    last = next(iter(model.parameters()))

    def step() -> None:  # the spans cost one test each while no trace is open
        opt.zero_grad()
        with record_function("forward"):
            loss = loss_fn(model(x), y)
        with record_function("backward"):
            loss.backward()
        with record_function("optimizer step"):
            opt.step()
            last.value.block_until_ready()

    return step


def _torch(rank: int, zero: str | None, hook: str | None, cap: float | None):
    import numpy as np
    import torch
    from torch.distributed.algorithms import ddp_comm_hooks

    torch.manual_seed(0)
    layers = []
    for i in range(LAYERS):
        layers.append(torch.nn.Linear(WIDTH, WIDTH))
        if i < LAYERS - 1:
            layers.append(torch.nn.ReLU())
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(*layers), bucket_cap_mb=cap
    )
    _register(model, ddp_comm_hooks, hook)
    if zero:
        from torch.distributed.optim import ZeroRedundancyOptimizer

        opt = ZeroRedundancyOptimizer(
            model.parameters(),
            optimizer_class=torch.optim.Adam,
            parameters_as_bucket_view=zero == "bucket",
            lr=LR,
        )
    else:
        opt = torch.optim.SGD(model.parameters(), lr=LR)
    rs = np.random.RandomState(rank)
    x = torch.from_numpy(rs.randn(BATCH, WIDTH).astype(np.float32))
    y = torch.from_numpy(rs.randn(BATCH, WIDTH).astype(np.float32))
    loss_fn = torch.nn.MSELoss()

    def step() -> None:
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()

    return step


def worker(spec: dict) -> None:
    """One rank: interleaved rounds of each library; rank 0 prints ``TIMES {json}``."""
    import numpy as np

    import tensorplay_jax.distributed as dist

    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", timeout=600)
    libs = {"ours": (_ours(rank, spec["zero"], spec["hook"], spec["cap"]), dist.barrier)}
    if spec["torch"]:
        import torch.distributed as tdist

        port = int(os.environ["MASTER_PORT"]) + 2
        tdist.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=n
        )
        libs["torch"] = (_torch(rank, spec["zero"], spec["hook"], spec["cap"]), tdist.barrier)
    for step, _ in libs.values():  # compile, grow buffers (and a hook's first steps)
        for _ in range(2 if spec["hook"] is None else 2 + POWER_SGD["start_powerSGD_iter"]):
            step()
    rounds: dict[str, list[float]] = {name: [] for name in libs}
    for _ in range(spec["rounds"]):
        for name, (step, barrier) in libs.items():
            barrier()
            t0 = time.perf_counter()
            for _ in range(spec["steps"]):
                step()
            rounds[name].append((time.perf_counter() - t0) / spec["steps"])
    out = {}
    for name, v in rounds.items():  # a round lasts as long as its slowest rank
        slowest = np.asarray(dist.all_reduce(np.asarray(v), op="max"))
        out[name] = statistics.median(slowest.tolist())
    if spec["trace"]:
        from tensorplay_jax import profiler

        step = libs["ours"][0]
        if rank == 0:
            with profiler.trace(spec["trace"]), profiler.record_function("step"):
                step()
        else:
            step()
    if spec["torch"]:
        tdist.destroy_process_group()
    dist.destroy_process_group()
    if rank == 0:
        print("TIMES " + json.dumps(out), flush=True)


# ------------------------------------------------------------------ the driver
def run(n: int, spec: dict) -> dict[str, float]:
    """Start ``n`` ranks of :func:`worker`; rank 0's median seconds per step per library."""
    port = _free_port()
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONWARNINGS="ignore")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(n))
    argv = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(spec)]
    procs = [
        subprocess.Popen(
            argv, env=dict(env, RANK=str(r), LOCAL_RANK=str(r)), stdout=subprocess.PIPE, text=True
        )
        for r in range(n)
    ]
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=TIMEOUT_S)[0])
    finally:
        for p in procs:
            p.kill()
    if any(p.returncode for p in procs):
        raise SystemExit(f"ddp benchmark: a rank failed at {n} ranks\n" + "".join(outs))
    line = next(ln for ln in outs[0].splitlines() if ln.startswith("TIMES "))
    return json.loads(line[len("TIMES ") :])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--nprocs", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10, help="timed steps per round")
    ap.add_argument("--only", choices=["both", "ours"], default=None)
    ap.add_argument("--trace", default=None, help="write rank 0's trace of one step here")
    ap.add_argument(
        "--zero",
        choices=["per-param", "bucket"],
        default=None,
        help="step with ZeroRedundancyOptimizer(Adam) (parameters_as_bucket_view False/True)",
    )
    ap.add_argument(
        "--hook",
        choices=["allreduce", "noop", "fp16", "powersgd"],
        default=None,
        help="register allreduce_hook, noop_hook, fp16_compress_hook or powerSGD_hook (rank 4)",
    )
    ap.add_argument(
        "--bucket-cap-mb",
        type=float,
        default=None,
        help=f"DDP's bucket_cap_mb on both (default: theirs; {HOOK_BUCKET_MB} with powersgd)",
    )
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker is not None:
        worker(json.loads(a.worker))
        return
    have_torch = importlib.util.find_spec("torch") is not None
    if a.only == "both" and not have_torch:
        ap.error("--only both: torch is not importable (put it on PYTHONPATH)")
    with_torch = have_torch and a.only != "ours"
    how = f"ZeroRedundancyOptimizer(Adam), {a.zero}" if a.zero else "SGD"
    if a.hook:
        how += f", {a.hook} hook" + (f" {POWER_SGD}" if a.hook == "powersgd" else "")
    if a.bucket_cap_mb or a.hook == "powersgd":
        how += f", bucket_cap_mb={a.bucket_cap_mb or HOOK_BUCKET_MB}"
    print(
        f"# DDP step ({how}), MLP {LAYERS} x {WIDTH}^2 (16 MiB), batch {BATCH}/rank, "
        f"{a.rounds} rounds x {a.steps} steps, median round"
    )
    print("| ranks | ours ms | torch ms | torch / ours |")
    print("|---|---|---|---|")
    for n in a.nprocs:
        trace = None
        if a.trace:
            trace = a.trace if len(a.nprocs) == 1 else f"{a.trace}.{n}ranks.json"
        spec = {
            "rounds": a.rounds,
            "steps": a.steps,
            "torch": with_torch,
            "trace": trace,
            "zero": a.zero,
            "hook": a.hook,
            "cap": a.bucket_cap_mb or (HOOK_BUCKET_MB if a.hook == "powersgd" else None),
        }
        t = run(n, spec)
        theirs = t.get("torch")
        ratio = f"{theirs / t['ours']:.2f}" if theirs else "-"
        torch_ms = f"{theirs * 1e3:.1f}" if theirs else "-"
        print(f"| {n} | {t['ours'] * 1e3:.1f} | {torch_ms} | {ratio} |", flush=True)
        if trace:
            print(f"# trace of one step at {n} ranks (rank 0): {trace}")


if __name__ == "__main__":
    main()
