"""Pipeline-parallel training step: tensorplay_jax beside torch.distributed.rpc, 3 workers.

The pattern of the pipeline-parallel tutorial: a driver (``w0``) and two stage
workers (``w1``, ``w2``), each stage an MLP ``Linear(512, 2048) -> ReLU ->
Linear(2048, 512)``. One training step on a batch of 256 rows cut into ``n``
micro-batches::

    for x in batch.split(256 // n):
        y_rref = stage1.remote().forward(RRef(x))      # stays on w1
        futs.append(stage2.rpc_async().forward(y_rref))  # w2 fetches it from w1
    out = cat([f.wait() for f in futs])
    dist_autograd.backward(ctx, [mse_loss(out, target)])
    opt.step(ctx)                                       # DistributedOptimizer, SGD

Each stage computes one micro-batch at a time (a lock, like one device). Both
libraries' jobs (three processes each) are up at once and take turns: each
driver warms every split (1, 2, 4, 8) up, then they alternate in *blocks*, ours
then torch, torch then ours, and so on; in a block a driver runs the splits in
turn, step by step, ``--passes`` times, and its first pass (the steps right
after the other library's block) is not counted. The job waiting for its turn
is stopped (``SIGSTOP``, see ``benchmarks._launch.Job``). So both libraries meet
the machine's load in the same seconds, where on a shared VM step times swing
from minute to minute. A cell is the median step of a round; a round
starts fresh jobs, and the table shows, per cell, the lower median over the
rounds, and the ratio of those.

Usage::

    PYTHONPATH=/tmp/torchlib python benchmarks/pipeline.py           # both
    python benchmarks/pipeline.py --only ours                         # skip torch
    python benchmarks/pipeline.py --only ours --counts                # per-step costs
    python benchmarks/pipeline.py --threads 1                         # one compute thread each
    python benchmarks/pipeline.py --cpu --splits 1 8 --rounds 1       # CPU time per worker
    python benchmarks/pipeline.py --cpu --forward-only --splits 8     # ... of the forward
    python benchmarks/pipeline.py --maths --splits 1 8 --rounds 7     # the maths alone

``--threads N`` gives each process N threads for its operations, both libraries:
``torch.set_num_threads(N)``, and for XLA's CPU client the ``NPROC`` environment
variable, which XLA reads for its thread pools' size when the backend starts (no JAX
API sets it). Three processes share this machine's two cores, so one thread each
spends less CPU on handing work between threads (``torchrun`` sets
``OMP_NUM_THREADS=1`` for the same reason).

``--maths`` runs the step's maths alone in one process, both libraries taking turns:
no RPC, no tape; for ours the fewest ``jax.jit`` programs a stage could run (see
``_maths_steps``). Its CPU time is the floor under a whole step's: spread over this
machine's cores, the least wall time any pipeline schedule could reach.

torch's ``DistributedOptimizer`` imports ``sympy`` (through FSDP): install it in the
interpreter that runs the torch workers.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._launch import Job, answer_requests, free_port, run_job

WORLD = 3
BATCH, D_IN, D_HID = 256, 512, 2048
SPLITS = (1, 2, 4, 8)
LR = 1e-3


class _Lib:
    """The handful of names that differ between the two libraries."""

    def __init__(self, impl: str) -> None:
        self.impl = impl
        if impl == "torch":
            import torch
            import torch.distributed.autograd as ag
            import torch.distributed.rpc as rpc
            from torch import nn
            from torch.distributed.optim import DistributedOptimizer

            self.tp, self.nn = torch, nn
            self.optimizer = lambda rrefs: DistributedOptimizer(torch.optim.SGD, rrefs, lr=LR)
            self.mse = torch.nn.functional.mse_loss
        else:
            import optax

            import tensorplay_jax as tp
            import tensorplay_jax.distributed.autograd as ag
            from tensorplay_jax import nn
            from tensorplay_jax.distributed import rpc
            from tensorplay_jax.distributed.optim import DistributedOptimizer
            from tensorplay_jax.nn import functional as F

            self.tp, self.nn = tp, nn
            self.optimizer = lambda rrefs: DistributedOptimizer(optax.sgd(LR), rrefs)
            self.mse = F.mse_loss
        self.rpc, self.ag = rpc, ag


_LIB: _Lib | None = None


class Stage:
    """One pipeline stage on its worker: the MLP and a lock (one micro-batch at a time)."""

    def __init__(self, seed: int) -> None:
        assert _LIB is not None
        tp, nn = _LIB.tp, _LIB.nn
        tp.manual_seed(seed)
        self.seq = nn.Sequential(nn.Linear(D_IN, D_HID), nn.ReLU(), nn.Linear(D_HID, D_IN))
        self.lock = threading.Lock()

    def forward(self, x_rref: Any) -> Any:
        x = x_rref.to_here()
        with self.lock:
            return self.seq(x)

    def parameter_rrefs(self) -> list[Any]:
        assert _LIB is not None
        return [_LIB.rpc.RRef(p) for p in self.seq.parameters()]


def make_stage(seed: int) -> Stage:
    return Stage(seed)


class _Driver:
    """The driver's model: two stage RRefs, the optimizer, one batch."""

    def __init__(self) -> None:
        assert _LIB is not None
        lib = _LIB
        self.s1 = lib.rpc.remote("w1", make_stage, args=(1,))
        self.s2 = lib.rpc.remote("w2", make_stage, args=(2,))
        params = self.s1.rpc_sync().parameter_rrefs() + self.s2.rpc_sync().parameter_rrefs()
        self.opt = lib.optimizer(params)
        lib.tp.manual_seed(0)
        self.x = lib.tp.randn(BATCH, D_IN)
        self.target = lib.tp.randn(BATCH, D_IN)

    def step(self, n: int, backward: bool = True) -> list[float]:
        """One training step in ``n`` micro-batches (its forward only, without
        ``backward``); the times its phases end at."""
        assert _LIB is not None
        rpc, ag, tp = _LIB.rpc, _LIB.ag, _LIB.tp
        with ag.context() as cid:
            futs = []
            for x in self.x.split(BATCH // n, dim=0):
                y_rref = self.s1.remote().forward(rpc.RRef(x))
                futs.append(self.s2.rpc_async().forward(y_rref))
            out = tp.cat([f.wait() for f in futs])
            t_fwd = time.perf_counter()
            if not backward:
                return [t_fwd, t_fwd, t_fwd]
            ag.backward(cid, [_LIB.mse(out, self.target)])
            t_bwd = time.perf_counter()
            self.opt.step(cid)
        return [t_fwd, t_bwd, time.perf_counter()]


class _Server:
    """Rank 0 of a job that takes turns (``benchmarks._launch.Job``): steps as asked."""

    def __init__(self) -> None:
        self.drv: _Driver | None = None

    def handle(self, request: dict[str, Any]) -> dict[str, list[list[float]]]:
        """Run ``request["steps"]`` passes over ``request["splits"]`` (one step of each
        split per pass); per split, each step's forward, backward and optimizer ms."""
        if self.drv is None:
            self.drv = _Driver()
        out: dict[str, list[list[float]]] = {str(n): [] for n in request["splits"]}
        for _ in range(request["steps"]):
            for n in request["splits"]:
                t0 = time.perf_counter()
                ends = self.drv.step(n)
                out[str(n)].append(
                    [(b - a) * 1e3 for a, b in zip([t0, *ends[:-1]], ends, strict=True)]
                )
        return out


def thread_cpu_ms() -> dict[str, float]:
    """This process's CPU time so far (user + system, ms), per thread name."""
    tick = 1e3 / os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            stat = Path(f"/proc/self/task/{tid}/stat").read_text()
            name = Path(f"/proc/self/task/{tid}/comm").read_text().strip()
        except OSError:  # the thread ended
            continue
        fields = stat.rpartition(")")[2].split()
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) * tick
    return out


def minor_faults() -> int:
    """This process's minor page faults so far (all threads). Linux only (``/proc``)."""
    return int(Path("/proc/self/stat").read_text().rpartition(")")[2].split()[7])


def cpu(splits: list[int], warmup: int, steps: int, backward: bool) -> dict[str, dict[str, float]]:
    """On the driver: per split, the CPU time each worker spends per step (all its threads),
    beside the wall time of a step (or of its forward only). Linux only (``/proc``)."""
    assert _LIB is not None
    rpc = _LIB.rpc
    drv = _Driver()
    res: dict[str, dict[str, float]] = {}
    for n in splits:
        for _ in range(warmup):
            drv.step(n, backward)
        before = [rpc.rpc_sync(f"w{r}", thread_cpu_ms) for r in range(WORLD)]
        faults = [rpc.rpc_sync(f"w{r}", minor_faults) for r in range(WORLD)]
        t0 = time.perf_counter()
        for _ in range(steps):
            drv.step(n, backward)
        wall = (time.perf_counter() - t0) / steps * 1e3
        after = [rpc.rpc_sync(f"w{r}", thread_cpu_ms) for r in range(WORLD)]
        faults = [rpc.rpc_sync(f"w{r}", minor_faults) - faults[r] for r in range(WORLD)]
        cell = {"wall": wall}
        for r in range(WORLD):
            used = sum(after[r].values()) - sum(before[r].get(k, 0.0) for k in after[r])
            cell[f"w{r}"] = used / steps
            cell[f"faults{r}"] = faults[r] / steps
        res[str(n)] = cell
    return res


def _maths_steps(n: int, impls: list[str]) -> dict[str, Any]:
    """Per library, a function running the maths of one ``n``-micro-batch step in this
    process, no RPC: both stages' forward, the loss, both stages' backward with the
    weight gradients summed over the micro-batches. Ours is the least a JAX program
    costs here: per micro-batch, one ``jax.jit`` program for stage 1's forward (keeping
    its hidden layer), one for stage 2's forward, loss and backward, one for stage 1's
    backward from what its forward kept, the gradients written into the running sums'
    (donated) buffers; the products as the layers' pullbacks need them, nothing recomputed."""
    import numpy as np

    rng = np.random.default_rng(0)
    shapes = [(D_HID, D_IN), (D_HID,), (D_IN, D_HID), (D_IN,)]
    params = [[rng.standard_normal(s, np.float32) * 0.02 for s in shapes] for _ in range(2)]
    x, t = (rng.standard_normal((BATCH, D_IN), np.float32) for _ in range(2))
    rows = BATCH // n
    steps: dict[str, Any] = {}
    if "ours" in impls:
        import jax
        import jax.numpy as jnp

        def forward(p: list[Any], x: Any) -> tuple[Any, Any]:
            h = jax.nn.relu(x @ p[0].T + p[1])
            return h @ p[2].T + p[3], h

        def backward(p: list[Any], x: Any, h: Any, gy: Any, acc: list[Any]) -> tuple[Any, ...]:
            gh = jnp.where(h > 0, gy @ p[2], 0.0)
            grads = [gh.T @ x, gh.sum(0), gy.T @ h, gy.sum(0)]
            return [a + g for a, g in zip(acc, grads, strict=True)], gh @ p[0]

        def stage2(p: list[Any], y: Any, t: Any, acc: list[Any]) -> tuple[Any, ...]:
            out, h = forward(p, y)
            return backward(p, y, h, 2 * (out - t) / (BATCH * D_IN), acc)

        def stage1_backward(p: list[Any], x: Any, h: Any, gy: Any, acc: list[Any]) -> Any:
            gh = jnp.where(h > 0, gy @ p[2], 0.0)  # no gradient for the batch itself
            grads = [gh.T @ x, gh.sum(0), gy.T @ h, gy.sum(0)]
            return [a + g for a, g in zip(acc, grads, strict=True)]

        fwd1 = jax.jit(forward)
        bwd2 = jax.jit(stage2, donate_argnums=3)
        bwd1 = jax.jit(stage1_backward, donate_argnums=4)
        jp = [[jnp.asarray(a) for a in p] for p in params]
        jx = [jnp.asarray(x[i : i + rows]) for i in range(0, BATCH, rows)]
        jt = [jnp.asarray(t[i : i + rows]) for i in range(0, BATCH, rows)]

        def ours() -> None:
            kept = [fwd1(jp[0], xi) for xi in jx]
            g1 = [jnp.zeros(s, jnp.float32) for s in shapes]
            g2 = [jnp.zeros(s, jnp.float32) for s in shapes]
            for xi, (yi, hi), ti in zip(jx, kept, jt, strict=True):
                g2, gy = bwd2(jp[1], yi, ti, g2)
                g1 = bwd1(jp[0], xi, hi, gy, g1)
            jax.block_until_ready((g1, g2))

        steps["ours"] = ours
    if "torch" in impls:
        import torch
        from torch.nn import functional as F

        tp = [[torch.tensor(a, requires_grad=True) for a in p] for p in params]
        tx, tt = torch.tensor(x), torch.tensor(t)

        def mlp_t(p: list[Any], h: Any) -> Any:
            return F.linear(torch.relu(F.linear(h, p[0], p[1])), p[2], p[3])

        def theirs() -> None:
            for a in tp[0] + tp[1]:
                a.grad = None
            out = torch.cat([mlp_t(tp[1], mlp_t(tp[0], xi)) for xi in tx.split(rows)])
            F.mse_loss(out, tt).backward()

        steps["torch"] = theirs
    return steps


def maths(impls: list[str], splits: list[int], rounds: int, threads: int) -> None:
    """Print the CPU and wall time of the maths of one step, per split and library, in
    this process, the libraries and splits taking turns (``--maths``)."""
    if "torch" in impls and importlib.util.find_spec("torch") is None:
        raise SystemExit(
            "--maths: torch is not importable here; put it on PYTHONPATH, or pass --only ours"
        )
    if threads:
        os.environ["NPROC"] = str(threads)  # before the XLA backend starts
    fns = {n: _maths_steps(n, impls) for n in splits}
    if threads and "torch" in impls:
        import torch

        torch.set_num_threads(threads)
    reps = 5
    got: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for n in splits:
        for f in fns[n].values():
            for _ in range(3):  # compile, warm up
                f()
    for _ in range(rounds):
        for n in splits:
            for impl, f in fns[n].items():
                c0, w0 = time.process_time(), time.perf_counter()
                for _ in range(reps):
                    f()
                c1, w1 = time.process_time(), time.perf_counter()
                got.setdefault((impl, n), []).append(
                    ((c1 - c0) / reps * 1e3, (w1 - w0) / reps * 1e3)
                )
    print("The maths of one step in one process, no RPC (median of rounds, ms)")
    print("| micro-batches | library | CPU | wall |")
    print("|---|---|---|---|")
    for (impl, n), cells in got.items():
        cpu_ms = statistics.median(c for c, _ in cells)
        wall_ms = statistics.median(w for _, w in cells)
        print(f"| {n} | {impl} | {cpu_ms:.1f} | {wall_ms:.1f} |", flush=True)


_COMPILES = [0]


def _count_compiles(name: str, *args: Any, **kwargs: Any) -> None:
    if name == "/jax/core/compile/backend_compile_duration":
        _COMPILES[0] += 1


def compiles() -> int:
    """XLA compilations in this process so far (ours only)."""
    return _COMPILES[0]


def counts(splits: list[int]) -> dict[str, dict[str, float]]:
    """On the driver (ours): messages and compilations per step on each worker, per split.

    Each split runs two traced steps after its warm-up; a cell is per step.
    """
    from tensorplay_jax import profiler

    assert _LIB is not None
    rpc = _LIB.rpc
    drv = _Driver()
    res: dict[str, dict[str, float]] = {}
    for n in splits:
        for _ in range(3):
            drv.step(n)
        before = [rpc.rpc_sync(f"w{r}", compiles) for r in range(WORLD)]
        with profiler.trace() as t:
            for _ in range(2):
                drv.step(n)
        after = [rpc.rpc_sync(f"w{r}", compiles) for r in range(WORLD)]
        cell: dict[str, float] = {}
        for row in t.summary().rows:
            if row.name.startswith("send "):  # one per message a worker sends
                key = f"{row.worker} {row.name[5:].replace('tensorplay_jax.', '')}"
                cell[key] = row.calls / 2
        for r in range(WORLD):
            cell[f"w{r} compilations"] = (after[r] - before[r]) / 2
        res[str(n)] = cell
    return res


def worker(impl: str, rank: int, port: int, cfg: str, out: str) -> None:
    global _LIB
    warnings.filterwarnings("ignore")  # torch's deprecation notes about its own internals
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    threads = json.loads(cfg).get("threads")
    if threads and impl == "ours":
        os.environ["NPROC"] = str(threads)  # before the XLA backend starts
    _LIB = _Lib(impl)
    if threads and impl == "torch":
        _LIB.tp.set_num_threads(threads)
    rpc = _LIB.rpc
    if impl == "ours":
        import jax

        jax.monitoring.register_event_duration_secs_listener(_count_compiles)
    rpc.init_rpc(f"w{rank}", rank=rank, world_size=WORLD)
    if rank == 0:
        c = json.loads(cfg)
        if c.get("serve"):
            answer_requests(_Server().handle)
        elif c.get("counts"):
            res: Any = counts(c["splits"])
        elif c.get("cpu"):
            res = cpu(c["splits"], c["warmup"], c["steps"], not c.get("forward_only"))
        if not c.get("serve"):
            Path(out).write_text(json.dumps(res))
    rpc.shutdown()


def run(impl: str, cfg: dict[str, Any]) -> dict[str, dict[str, float]]:
    port = str(free_port())
    boot = (
        "import sys; from benchmarks.pipeline import worker; "
        "worker(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])"
    )
    return run_job(boot, [[impl, str(r), port, json.dumps(cfg)] for r in range(WORLD)], impl)


def interleaved(
    impls: list[str], cfg: dict[str, Any], warmup: int, blocks: int, passes: int
) -> dict[str, tuple[dict[str, float], dict[str, list[list[float]]]]]:
    """One round: both libraries' jobs up at once, taking turns in blocks (see the module
    docstring). Per library: each split's first step (ms), and its counted steps' phases."""
    if passes < 2:
        raise SystemExit("--passes must be at least 2 (a block's first pass is not counted)")
    boot = (
        "import sys; from benchmarks.pipeline import worker; "
        "worker(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])"
    )
    splits = cfg["splits"]
    jobs: dict[str, Job] = {}
    try:
        for impl in impls:
            port = str(free_port())
            argv = [[impl, str(r), port, json.dumps(cfg), "-"] for r in range(WORLD)]
            jobs[impl] = Job(boot, argv, impl)
        firsts: dict[str, dict[str, float]] = {}
        for job in jobs.values():  # both start up together; then one at a time
            job.ask({"splits": splits, "steps": 0})
            job.pause()
        for impl, job in jobs.items():
            got = job.ask({"splits": splits, "steps": warmup})
            job.pause()
            firsts[impl] = {n: sum(steps[0]) for n, steps in got.items()}
        counted: dict[str, dict[str, list[list[float]]]] = {
            i: {str(n): [] for n in splits} for i in impls
        }
        for b in range(blocks):
            for impl in impls if b % 2 == 0 else impls[::-1]:
                got = jobs[impl].ask({"splits": splits, "steps": passes})
                jobs[impl].pause()  # the other library's turn: nothing of this job runs
                for n, steps in got.items():
                    counted[impl][n] += steps[1:]
        for job in jobs.values():
            job.close()
    finally:
        for job in jobs.values():
            job.kill()
    return {i: (firsts[i], counted[i]) for i in impls}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=["ours", "torch"], default=None)
    ap.add_argument("--splits", type=int, nargs="+", default=list(SPLITS))
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=15, help="with --cpu: steps per split")
    ap.add_argument("--rounds", type=int, default=2, help="fresh jobs each round")
    ap.add_argument("--blocks", type=int, default=8, help="turns of each library a round")
    ap.add_argument("--passes", type=int, default=3, help="per block (1st uncounted)")
    ap.add_argument("--counts", action="store_true", help="ours: messages, compilations / step")
    ap.add_argument("--threads", type=int, default=None, help="compute threads per process")
    ap.add_argument("--cpu", action="store_true", help="CPU time per step of each worker")
    ap.add_argument("--forward-only", action="store_true", help="with --cpu: the forward only")
    ap.add_argument("--maths", action="store_true", help="the maths alone, one process")
    a = ap.parse_args()
    cfg = {
        "splits": a.splits,
        "warmup": a.warmup,
        "steps": a.steps,
        "counts": a.counts,
        "threads": a.threads,
        "cpu": a.cpu,
        "forward_only": a.forward_only,
    }
    if a.counts:
        got = run("ours", cfg)
        keys = sorted({k for cell in got.values() for k in cell})
        print(f"{'per step (ours)':<58}" + "".join(f"{'n=' + n:>8}" for n in got))
        for k in keys:
            print(f"{k:<58}" + "".join(f"{got[n].get(k, 0):>8g}" for n in got))
        return
    impls = [i for i in ("ours", "torch") if a.only in (None, i)]
    if a.maths:
        maths(impls, a.splits, a.rounds, a.threads)
        return
    if a.cpu:
        print("CPU ms per step (driver w0, stages w1 w2), the step's wall time, and minor page")
        print("faults per step on w0, w1, w2")
        print("| micro-batches | library | w0 | w1 | w2 | all | wall | all / wall | faults |")
        print("|---|---|---|---|---|---|---|---|---|")
        for _ in range(a.rounds):
            for impl in impls:
                for n, c in run(impl, cfg).items():
                    total = c["w0"] + c["w1"] + c["w2"]
                    print(
                        f"| {n} | {impl} | {c['w0']:.1f} | {c['w1']:.1f} | {c['w2']:.1f} | "
                        f"{total:.1f} | {c['wall']:.1f} | {total / c['wall']:.2f} | "
                        f"{c['faults0']:.0f} {c['faults1']:.0f} {c['faults2']:.0f} |",
                        flush=True,
                    )
        return
    cells: dict[str, dict[str, list[float]]] = {i: {str(n): [] for n in a.splits} for i in impls}
    first: dict[str, dict[str, float]] = {i: {} for i in impls}
    for r in range(a.rounds):
        got = interleaved(impls, dict(cfg, serve=True), a.warmup, a.blocks, a.passes)
        for impl, (firsts, steps) in got.items():
            line = []
            for n, phases in steps.items():
                med = statistics.median(sum(p) for p in phases)
                cells[impl][n].append(med)
                first[impl].setdefault(n, firsts[n])
                parts = "+".join(f"{statistics.median(p[i] for p in phases):.0f}" for i in range(3))
                line.append(f"{n}: {med:.1f} ({parts})")
            print(
                f"round {r + 1}/{a.rounds} {impl} step ms (fwd+bwd+opt): {', '.join(line)}",
                flush=True,
            )
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"\n{time.strftime('%Y-%m-%d')}, {platform.machine()} {os.cpu_count()} cores, "
        f"load {load:.1f}; python benchmarks/pipeline.py "
        f"--rounds {a.rounds} --blocks {a.blocks} --passes {a.passes} --warmup {a.warmup}"
        + (f" --threads {a.threads}" if a.threads else "")
    )
    print("| micro-batches | torch step | ours step | ours / torch | ours first step |")
    print("|---|---|---|---|---|")
    for n in map(str, a.splits):
        o = min(cells["ours"][n]) if "ours" in cells else None
        t = min(cells["torch"][n]) if "torch" in cells else None
        fo = f"{o:.1f} ms" if o is not None else "-"
        ft = f"{t:.1f} ms" if t is not None else "-"
        ratio = f"{o / t:.2f}x" if o and t else "-"
        f1 = f"{first['ours'][n]:.0f} ms" if "ours" in first and n in first["ours"] else "-"
        print(f"| {n} | {ft} | {fo} | {ratio} | {f1} |")


if __name__ == "__main__":
    main()
