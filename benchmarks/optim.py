"""Optimizer benchmark: ``optim.X.step()`` beside torch's and beside a per-step optax stand-in.

The parameters of a 4-layer MLP (8 Tensors, 256 wide: about 150k values) with
fixed gradients; each timed call is one ``step()``. Cases, interleaved round by
round so all see the same machine load, best round of each:

- ``ours SGD(momentum)`` / ``ours Adam``: ``tensorplay_jax.optim`` (one jitted call
  per param group per step);
- ``optax stand-in SGD(momentum)``: what the ported tutorials carried before
  ``tensorplay_jax.optim`` existed: ``tx.update`` and ``optax.apply_updates`` run
  op by op (not jitted) over the parameter list, then ``p.data = v``;
- ``torch SGD(momentum)`` / ``torch Adam``: torch's, one thread (when importable).

Usage::

    python benchmarks/optim.py                 # PYTHONPATH=/tmp/torchlib for torch
    python benchmarks/optim.py --rounds 9 --n 300
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import time
from collections.abc import Callable
from typing import Any

import numpy as np

SIZES = [(256, 64), (256,), (256, 256), (256,), (256, 256), (256,), (10, 256), (10,)]


def _time(fn: Callable[[], Any], n: int) -> float:
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n * 1e6


def _data() -> tuple[list[np.ndarray], list[np.ndarray]]:
    rng = np.random.default_rng(0)
    values = [rng.standard_normal(s).astype(np.float32) * 0.01 for s in SIZES]
    grads = [rng.standard_normal(s).astype(np.float32) * 0.01 for s in SIZES]
    return values, grads


def _ours() -> dict[str, Callable[[], Any]]:
    import optax

    import tensorplay_jax as tp
    from tensorplay_jax import optim

    values, grads = _data()
    cases = {}
    for name, make in {
        "ours SGD(momentum)": lambda ps: optim.SGD(ps, lr=1e-3, momentum=0.9),
        "ours Adam": lambda ps: optim.Adam(ps, lr=1e-3),
    }.items():
        ps = [tp.nn.Parameter(tp.tensor(v)) for v in values]
        for p, g in zip(ps, grads, strict=True):
            p.grad = tp.tensor(g)
        cases[name] = make(ps).step

    ps = [tp.nn.Parameter(tp.tensor(v)) for v in values]
    for p, g in zip(ps, grads, strict=True):
        p.grad = tp.tensor(g)
    tx = optax.sgd(1e-3, momentum=0.9)
    state = [tx.init([p.value for p in ps])]

    def stand_in() -> None:  # the tutorials' former class SGD, step()
        vals = [p.value for p in ps]
        updates, state[0] = tx.update([p.grad.value for p in ps], state[0], vals)
        for p, v in zip(ps, optax.apply_updates(vals, updates), strict=True):
            p.data = v

    cases["optax stand-in SGD(momentum)"] = stand_in
    return cases


def _torch() -> dict[str, Callable[[], Any]]:
    import torch

    torch.set_num_threads(1)
    values, grads = _data()
    cases = {}
    for name, make in {
        "torch SGD(momentum)": lambda ps: torch.optim.SGD(ps, lr=1e-3, momentum=0.9),
        "torch Adam": lambda ps: torch.optim.Adam(ps, lr=1e-3),
    }.items():
        ps = [torch.nn.Parameter(torch.tensor(v)) for v in values]
        for p, g in zip(ps, grads, strict=True):
            p.grad = torch.tensor(g)
        cases[name] = make(ps).step
    return cases


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--n", type=int, default=200, help="steps per timed round")
    args = p.parse_args()
    cases = _ours()
    try:
        cases.update(_torch())
    except ImportError:
        print("# torch is not importable: its rows are left out")
    for fn in cases.values():  # warm up: compiles
        for _ in range(5):
            fn()
    best = dict.fromkeys(cases, float("inf"))
    for _ in range(args.rounds):
        for name, fn in cases.items():
            best[name] = min(best[name], _time(fn, args.n))
    print(f"# optimizer benchmark, {datetime.datetime.now().isoformat(timespec='seconds')}")
    print(
        f"# machine: {platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, load {os.getloadavg()[0]:.1f}"
    )
    print(f"# {len(SIZES)} parameters, {sum(int(np.prod(s)) for s in SIZES)} values")
    print("| case | µs per step |\n|---|---|")
    for name, us in best.items():
        print(f"| {name} | {us:.0f} |")


if __name__ == "__main__":
    main()
