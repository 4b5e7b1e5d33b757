"""Eager benchmark: tensorplay_jax's Tensor and tape beside torch (one thread), in one process.

Measures, interleaved round by round (ours, torch, ours, ...) so both see the same
machine load, the best round of each:

- ``step``: ``w.grad = None; (x @ w).relu().sum().backward()``, x 32x64, w 64x64;
  ours defers the recorded operations, and a recurring step runs its forward
  and backward as one compiled program (``autograd.speedups``);
- ``step (deferral off)``: the same step on the reference path, with each
  operation run at once and the backward node by node, one compiled call per
  operation (``tp.autograd.set_deferred(False)``: no speed-up layer);
- the step's pieces: recording ``x @ w``, ``.relu()`` and ``.sum()`` (ours only;
  deferred, and with deferral off); ``record the step``: the step's three
  operations recorded as a recurring step records them (checked against the
  known pattern, ``speedups._replay``), the result dropped unrun;
- ``floor: one jit(value_and_grad) call``: the same step written as one
  ``jax.jit(jax.value_and_grad(f))`` call with the gradient stored in ``w.grad``
  (the least one compiled dispatch a step costs here);
- ``dispatch``: one cached ``jax.jit`` call of a 32x64 @ 64x64 matmul;
- ``list(ones(200))``: iterating a 200-element Tensor (after one first call of
  that shape, which is reported separately: it may compile).

Usage::

    python benchmarks/eager.py                 # both (torch needs to be importable)
    python benchmarks/eager.py --only ours
    python benchmarks/eager.py --rounds 9 --n 300
    python benchmarks/eager.py --cpu-sync-dispatch   # JAX runs each CPU program inline

``--cpu-sync-dispatch`` sets ``jax_cpu_enable_async_dispatch`` off: each compiled
call then computes on the calling thread, as torch does, instead of handing the
work to XLA's CPU thread, a hand-off that a loaded machine makes slow and uneven.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from collections.abc import Callable
from typing import Any


def _time(fn: Callable[[], Any], n: int) -> float:
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n * 1e6


def _cases(lib: Any, ours: bool) -> dict[str, Callable[[], Any]]:
    if ours:
        lib.manual_seed(0)
    x = lib.randn(32, 64)
    w = lib.randn(64, 64, requires_grad=True)

    def step() -> None:
        w.grad = None
        (x @ w).relu().sum().backward()

    ones = lib.ones(200)
    cases: dict[str, Callable[[], Any]] = {"step": step, "list(ones(200))": lambda: list(ones)}
    if ours:
        import jax
        import jax.numpy as jnp

        y = x @ w
        r = y.relu()
        y.numpy()  # y and r hold values: each piece records one operation on them
        matmul = jax.jit(jnp.matmul)
        vg = jax.jit(jax.value_and_grad(lambda wv, xv: jax.nn.relu(xv @ wv).sum()))
        xv, wv = x.value, w.value

        def floor() -> None:
            w.grad = None
            _, g = vg(wv, xv)
            w.grad = g

        def eager(fn: Callable[[], Any]) -> Callable[[], Any]:
            def run() -> Any:
                old = lib.autograd.set_deferred(False)
                try:
                    return fn()
                finally:
                    lib.autograd.set_deferred(old)

            return run

        cases.update(
            {
                "step (deferral off)": eager(step),
                "floor: one jit(value_and_grad) call": floor,
                "  record the step (dropped unrun)": lambda: (x @ w).relu().sum(),
                "  x @ w (deferred)": lambda: x @ w,
                "  .relu() (deferred)": lambda: y.relu(),
                "  .sum() (deferred)": lambda: r.sum(),
                "  x @ w (deferral off)": eager(lambda: x @ w),
                "  .relu() (deferral off)": eager(lambda: y.relu()),
                "  .sum() (deferral off)": eager(lambda: r.sum()),
                "dispatch (one jit call)": lambda: matmul(xv, wv),
            }
        )
    return cases


def _first_list(lib: Any) -> float:
    t = time.perf_counter()
    list(lib.ones(200))
    return (time.perf_counter() - t) * 1e3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--only", choices=("ours", "torch"))
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--n", type=int, default=200, help="calls per timed round")
    p.add_argument(
        "--cpu-sync-dispatch",
        action="store_true",
        help="run JAX's CPU programs on the calling thread (jax_cpu_enable_async_dispatch off)",
    )
    args = p.parse_args()
    if args.cpu_sync_dispatch:
        import jax

        jax.config.update("jax_cpu_enable_async_dispatch", False)

    libs: dict[str, Any] = {}
    if args.only != "torch":
        import tensorplay_jax

        libs["ours"] = tensorplay_jax
    if args.only != "ours":
        import torch

        torch.set_num_threads(1)
        libs["torch"] = torch

    first = {name: _first_list(lib) for name, lib in libs.items()}
    cases = {name: _cases(lib, name == "ours") for name, lib in libs.items()}
    for name in cases:  # warm up: compiles, caches, fused backward
        for fn in cases[name].values():
            for _ in range(10):
                fn()
    best: dict[tuple[str, str], float] = {}
    for _ in range(args.rounds):
        for name, fns in cases.items():
            for case, fn in fns.items():
                us = _time(fn, args.n)
                best[(name, case)] = min(best.get((name, case), float("inf")), us)

    print(f"# eager benchmark, {datetime.datetime.now().isoformat(timespec='seconds')}")
    print(
        f"# machine: {platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, load {os.getloadavg()[0]:.1f}"
    )
    print(f"# command: {' '.join([os.path.basename(sys.executable), *sys.argv])}")
    print(f"# best of {args.rounds} interleaved rounds of {args.n} calls; torch with 1 thread")
    if args.cpu_sync_dispatch:
        print("# JAX CPU dispatch: synchronous (jax_cpu_enable_async_dispatch off)")
    names = list(libs)
    print(
        "| case | "
        + " | ".join(f"{n} (us)" for n in names)
        + (" | ours/torch |" if len(names) == 2 else " |")
    )
    print("|---" * (len(names) + 1 + (len(names) == 2)) + "|")
    all_cases = list(dict.fromkeys(c for fns in cases.values() for c in fns))
    for case in all_cases:
        cells = [f"{best[(n, case)]:.1f}" if (n, case) in best else "" for n in names]
        ratio = ""
        if len(names) == 2 and all((n, case) in best for n in names):
            ratio = f" | {best[('ours', case)] / best[('torch', case)]:.2f}x"
        elif len(names) == 2:
            ratio = " | "
        print(f"| {case} | " + " | ".join(cells) + ratio + " |")
    for n in names:
        print(f"# first list(ones(200)) of the process, {n}: {first[n]:.1f} ms")


if __name__ == "__main__":
    main()
