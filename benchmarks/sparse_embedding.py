"""A sparse embedding server: does a step cost what the batch touches, or what the table holds?

Two RPC workers (``rpc.spawn``): ``server`` holds ``nn.Embedding(rows, 64, sparse=True)``;
``trainer`` runs the parameter-server step of the RPC tutorials on it: look up a
batch of ``--touched`` random rows on the server (``rpc_sync``), a loss on the
trainer, ``dist_autograd.backward`` (the gradient goes back to the server as a
sparse tensor of the touched rows) and ``DistributedOptimizer(optim.SGD)``, which
steps those rows of the table in place. For each table size it prints the
median step time and the server's peak memory during the timed steps above its
memory before them (``VmHWM`` after resetting it through ``/proc/self/clear_refs``,
less ``VmRSS``), beside the table's own size. A step that densified the gradient
or copied the table would show the table's size in that growth and a time that
grows with the rows.

``--optimizer local`` steps with an ``optim.SGD`` on the server instead, from the
context's gradients (``apply_gradients``, as ``step()``). Both write the touched rows
in the table's donated buffer (``optim._sparse``).

Usage::

    python benchmarks/sparse_embedding.py                       # 1e5, 1e6 and 1e7 rows
    python benchmarks/sparse_embedding.py --rows 100000 --steps 50
    python benchmarks/sparse_embedding.py --optimizer local
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DIM = 64
_table = None  # the server's embedding (set by _make)
_local_opt = None  # the server's own optimizer (--optimizer local)


def _status_mib(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise KeyError(field)


def _make(rows: int) -> list:
    """On the server: the table, and RRefs of its parameters for the optimizer."""
    global _table
    import tensorplay_jax as tp
    from tensorplay_jax.distributed import rpc

    tp.manual_seed(0)
    _table = tp.nn.Embedding(rows, DIM, sparse=True)
    return [rpc.RRef(p) for p in _table.parameters()]


def _lookup(idx):
    return _table(idx)


def _local_step(ctx_id: int) -> int:
    """On the server: step the table with its own SGD from context ``ctx_id``'s gradients."""
    global _local_opt
    import tensorplay_jax.distributed.autograd as dist_autograd
    from tensorplay_jax import optim

    if _local_opt is None:
        _local_opt = optim.SGD(_table.parameters(), lr=0.05)
    return _local_opt.apply_gradients(dist_autograd.get_gradients(ctx_id))


def _reset_peak() -> float:
    """On the server: start a new peak (``VmHWM``) and return the memory now, MiB."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return _status_mib("VmRSS")


def _peak() -> float:
    return _status_mib("VmHWM")


def _worker(
    rank: int, rows: int, touched: int, steps: int, warmup: int, local: bool
) -> dict | None:
    import tensorplay_jax as tp
    import tensorplay_jax.distributed.autograd as dist_autograd
    from tensorplay_jax import optim
    from tensorplay_jax.distributed import rpc
    from tensorplay_jax.distributed.optim import DistributedOptimizer

    rpc.init_rpc("server" if rank == 0 else "trainer", rank=rank, world_size=2)
    result = None
    if rank == 1:
        params = rpc.rpc_sync("server", _make, args=(rows,), timeout=600)
        opt = DistributedOptimizer(optim.SGD, params, lr=0.05)
        gen = tp.Generator().manual_seed(1)

        def step() -> None:
            idx = tp.randint(0, rows, (touched,), generator=gen)
            with dist_autograd.context() as ctx:
                out = rpc.rpc_sync("server", _lookup, args=(idx,))
                loss = (out * out).sum()
                dist_autograd.backward(ctx, [loss])
                if local:
                    rpc.rpc_sync("server", _local_step, args=(ctx,))
                else:
                    opt.step(ctx)

        for _ in range(warmup):
            step()
        base = rpc.rpc_sync("server", _reset_peak)
        times = []
        for _ in range(steps):
            t = time.perf_counter()
            step()
            times.append(time.perf_counter() - t)
        peak = rpc.rpc_sync("server", _peak)
        result = {"step_ms": 1e3 * statistics.median(times), "growth_mib": peak - base}
    rpc.shutdown()
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rows", type=int, nargs="+", default=[10**5, 10**6, 10**7])
    p.add_argument("--touched", type=int, default=1000, help="rows a batch looks up")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--optimizer", choices=["distributed", "local"], default="distributed")
    args = p.parse_args()

    from tensorplay_jax.distributed import rpc

    started = datetime.datetime.now().isoformat(timespec="seconds")
    rows_out = []
    for rows in args.rows:
        local = args.optimizer == "local"
        worker_args = (rows, args.touched, args.steps, args.warmup, local)
        got = rpc.spawn(_worker, 2, args=worker_args, timeout=1800)
        rows_out.append((rows, got[1]))
        print(f"# {rows} rows: {got[1]}", flush=True)
    print(f"# sparse embedding server, {started}")
    print(
        f"# machine: {platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}; load after "
        f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )
    print(f"# command: {' '.join([os.path.basename(sys.executable), *sys.argv])}")
    print(
        f"# {args.touched} rows touched per step, dim {DIM}, median of {args.steps} steps, "
        f"{args.optimizer} optimizer"
    )
    print("| rows | table MiB | step ms | server peak growth MiB |")
    print("|---|---|---|---|")
    for rows, r in rows_out:
        table = rows * DIM * 4 / 2**20
        print(f"| {rows:,} | {table:,.0f} | {r['step_ms']:.2f} | {r['growth_mib']:.1f} |")


if __name__ == "__main__":
    main()
