"""Distributed autograd benchmark: tensorplay_jax beside torch.distributed.autograd, 4 workers.

Forward + backward per iteration (``with context()``, RPCs, ``backward``,
``get_gradients``, context release), in the same run for both:

- one_hop: ``loss = rpc_sync(w1, double, (t,)).sum()``;
- chain_3hop: w0 -> w1 -> w2 -> w3, each hop doubling and calling the next
  (nested RPCs), the loss on w0;
- ps_2trainers: w0 and w2 train concurrently against a parameter held in an
  RRef on w1 (``y = rpc_sync(w1, use_param, (rref, x))``); time per
  iteration of one trainer while both run.

Each figure is the best of ``--repeats`` runs of ``--iters`` iterations, and
the best over ``--rounds`` rounds; a round starts fresh workers for ours, then
for torch, so both meet the same machine state (on a small shared VM, where
the scheduler puts four processes on two cores swings single runs by 20%).

Usage::

    python benchmarks/dist_autograd.py               # both, full table
    python benchmarks/dist_autograd.py --only ours   # skip torch
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WORLD = 4
N = 16  # elements per tensor


def double(t: Any) -> Any:
    return t * 2


def hop(t: Any, rest: list[str], rpc_sync: Any) -> Any:
    y = t * 2
    if not rest:
        return y
    return rpc_sync(rest[0], hop, args=(y, rest[1:], rpc_sync))


def use_param(rref: Any, x: Any) -> Any:
    return rref.local_value() * x


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Impl:
    """The handful of calls that differ between the two libraries."""

    def __init__(self, name: str) -> None:
        self.name = name
        if name == "torch":
            import torch
            import torch.distributed.autograd as dist_autograd
            import torch.distributed.rpc as rpc

            self.leaf = lambda: torch.ones(N, requires_grad=True)
            self.param = lambda: torch.ones(N, requires_grad=True)
        else:
            import tensorplay_jax as tp
            import tensorplay_jax.distributed.autograd as dist_autograd
            from tensorplay_jax.distributed import rpc

            self.leaf = lambda: tp.ones(N, requires_grad=True)
            self.param = lambda: tp.ones(N, requires_grad=True)
        self.rpc, self.ag = rpc, dist_autograd


_IMPL: _Impl | None = None


def make_param() -> Any:
    assert _IMPL is not None
    return _IMPL.param()


def trainer_loop(rref: Any, iters: int) -> float:
    """Run ``iters`` trainer iterations against the parameter server; return seconds."""
    assert _IMPL is not None
    rpc, ag = _IMPL.rpc, _IMPL.ag
    x = _IMPL.leaf()
    t0 = time.perf_counter()
    for _ in range(iters):
        with ag.context() as cid:
            y = rpc.rpc_sync("w1", use_param, args=(rref, x))
            ag.backward(cid, [(y * y).sum()])
            ag.get_gradients(cid)
    return time.perf_counter() - t0


def _time(fn: Any, iters: int, repeats: int) -> float:
    for _ in range(max(iters // 10, 20)):
        fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        best = min(best, (time.perf_counter() - t0) / iters)
    return best * 1e3


def worker(impl: str, rank: int, port: int, iters: int, repeats: int, out: str) -> None:
    global _IMPL
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    _IMPL = _Impl(impl)
    rpc, ag = _IMPL.rpc, _IMPL.ag
    rpc.init_rpc(f"w{rank}", rank=rank, world_size=WORLD)
    if rank == 0:
        t = _IMPL.leaf()
        res: dict[str, float] = {}

        def one_hop() -> None:
            with ag.context() as cid:
                ag.backward(cid, [rpc.rpc_sync("w1", double, args=(t,)).sum()])
                ag.get_gradients(cid)

        def chain() -> None:
            with ag.context() as cid:
                out = rpc.rpc_sync("w1", hop, args=(t, ["w2", "w3"], rpc.rpc_sync))
                ag.backward(cid, [out.sum()])
                ag.get_gradients(cid)

        res["one_hop"] = _time(one_hop, iters, repeats)
        res["chain_3hop"] = _time(chain, iters // 2, repeats)
        rref = rpc.remote("w1", make_param)
        trainer_loop(rref, 20)
        best = float("inf")
        for _ in range(repeats):
            other = rpc.rpc_async("w2", trainer_loop, args=(rref, iters // 2))
            mine = trainer_loop(rref, iters // 2)
            best = min(best, max(mine, other.wait()) / (iters // 2))
        res["ps_2trainers"] = best * 1e3
        del rref
        Path(out).write_text(json.dumps(res))
    rpc.shutdown()


def run(impl: str, iters: int, repeats: int) -> dict[str, float]:
    port = _port()
    out = f"/tmp/tpj-bench-dag-{impl}-{os.getpid()}.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu")
    boot = (
        "import sys; from benchmarks.dist_autograd import worker; "
        "worker(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), "
        "int(sys.argv[5]), sys.argv[6])"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", boot, impl, str(r), str(port), str(iters), str(repeats), out],
            env=env,
            cwd=ROOT,
        )
        for r in range(WORLD)
    ]
    for p in procs:
        if p.wait(timeout=900) != 0:
            raise SystemExit(f"{impl} benchmark worker failed")
    res = json.loads(Path(out).read_text())
    os.unlink(out)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=["ours", "torch"], default=None)
    ap.add_argument("--iters", type=int, default=400)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    results: dict[str, dict[str, float]] = {}
    for r in range(a.rounds):
        for impl in ("ours", "torch"):
            if a.only in (None, impl):
                got = run(impl, a.iters, a.repeats)
                print(
                    f"round {r + 1}/{a.rounds} {impl}: "
                    + ", ".join(f"{k} {v:.2f}" for k, v in got.items()),
                    flush=True,
                )
                best = results.setdefault(impl, got)
                for k, v in got.items():
                    best[k] = min(best[k], v)
    print(f"{'ms / iteration':<16}{'tensorplay_jax':>16}{'torch':>10}{'ratio':>9}  target")
    for k in ("one_hop", "chain_3hop", "ps_2trainers"):
        o = results.get("ours", {}).get(k)
        t = results.get("torch", {}).get(k)
        ratio = f"{o / t:.2f}x" if o and t else "-"
        fo = f"{o:.2f}" if o is not None else "-"
        ft = f"{t:.2f}" if t is not None else "-"
        print(f"{k:<16}{fo:>16}{ft:>10}{ratio:>9}  <= 0.80x")


if __name__ == "__main__":
    main()
