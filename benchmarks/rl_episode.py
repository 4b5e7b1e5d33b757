"""An eager RL episode beside torch: the batch RL example's agent, in one process.

PyTorch's batch RL example (``examples/tutorials/rpc_batch_rl.py``) spends its time
in the agent's eager steps: each of an episode's 500 steps takes a state from NumPy,
writes it into a buffer in place, runs the policy (``Linear``, ``Dropout``,
``relu``, ``Linear``, ``softmax``) on a copy, samples a ``Categorical`` action and
keeps its log-probability; the episode ends with one backward through all 500 steps
and an ``Adam`` step. This script runs that agent without RPC (the observers'
states are random), ours and torch interleaved round by round in one process, and
prints the median per phase (torch with one thread, as ``benchmarks/eager.py``):

- ``steps``: the 500 steps (what a served ``select_action`` call runs);
- ``backward``: ``loss.backward()`` through the 500 steps' graphs;
- ``optimizer``: ``Adam.step()`` and ``zero_grad()``;

and, per step, its pieces (``--pieces``): the state's ``from_numpy(...).float()
.unsqueeze(0)``, the in-place ``copy_`` into the buffer, the policy, ``sample``
(which also runs the deferred policy forward here), ``log_prob`` and the
``.item()`` of the action.

``--gc-freeze`` calls ``gc.freeze()`` after the imports (both libraries in the process:
the cyclic collector's full passes then skip what the imports made).

Usage::

    python benchmarks/rl_episode.py                   # torch needs to be importable
    python benchmarks/rl_episode.py --rounds 5 --pieces
    python benchmarks/rl_episode.py --gc-freeze
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

STEPS = 500


def _policy(lib: Any, nn: Any, F: Any) -> Any:
    """The example's policy, its parameters drawn from seed 0."""

    class Policy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.affine1 = nn.Linear(4, 128)
            self.dropout = nn.Dropout(p=0.6)
            self.affine2 = nn.Linear(128, 2)

        def forward(self, x: Any) -> Any:
            x = F.relu(self.dropout(self.affine1(x)))
            return F.softmax(self.affine2(x), dim=2)

    lib.manual_seed(0)
    return Policy()


def _agent(lib: Any, nn: Any, F: Any, optim: Any, Categorical: Any) -> Callable[[dict], None]:
    """One episode of the example's agent as a function of a phase-timing dict."""
    policy = _policy(lib, nn, F)
    optimizer = optim.Adam(policy.parameters(), lr=1e-2)
    states = np.random.default_rng(0).standard_normal((STEPS, 4)).astype(np.float32)

    def episode(t: dict[str, float]) -> None:
        buffer = lib.zeros(1, 1, 4)
        saved = []
        start = time.perf_counter()
        for step in range(STEPS):
            state = lib.from_numpy(states[step]).float().unsqueeze(0)
            buffer[0].copy_(state)
            m = Categorical(policy(buffer.clone()))
            action = m.sample()
            saved.append(m.log_prob(action).t()[0])
            action[0].item()
        mid = time.perf_counter()
        loss = (-lib.stack(saved) * lib.ones(STEPS, 1)).sum()
        loss.backward()
        after = time.perf_counter()
        optimizer.step()
        optimizer.zero_grad()
        end = time.perf_counter()
        for k, v in (("steps", mid - start), ("backward", after - mid), ("optimizer", end - after)):
            t[k] = v * 1e3

    return episode


def _pieces(lib: Any, nn: Any, F: Any, Categorical: Any, n: int) -> dict[str, float]:
    """The median microseconds of each piece of a step, over ``n`` steps."""
    policy = _policy(lib, nn, F)
    buffer = lib.zeros(1, 1, 4)
    state = np.random.default_rng(0).standard_normal(4).astype(np.float32)
    times: dict[str, list[float]] = {}
    for _ in range(n):
        marks = [time.perf_counter()]
        x = lib.from_numpy(state).float().unsqueeze(0)
        marks.append(time.perf_counter())
        buffer[0].copy_(x)
        marks.append(time.perf_counter())
        probs = policy(buffer.clone())
        marks.append(time.perf_counter())
        m = Categorical(probs)
        action = m.sample()
        marks.append(time.perf_counter())
        m.log_prob(action).t()[0]
        marks.append(time.perf_counter())
        action[0].item()
        marks.append(time.perf_counter())
        names = ("input", "copy_", "policy", "sample", "log_prob", "item")
        for name, a, b in zip(names, marks, marks[1:], strict=False):
            times.setdefault(name, []).append((b - a) * 1e6)
    return {k: statistics.median(v[n // 5 :]) for k, v in times.items()}  # warm part


def _libs(only: str | None) -> dict[str, tuple[Any, ...]]:
    libs: dict[str, tuple[Any, ...]] = {}
    if only != "torch":
        import tensorplay_jax as tp
        import tensorplay_jax.nn.functional as tF
        from tensorplay_jax.distributions import Categorical as tC

        libs["ours"] = (tp, tp.nn, tF, tp.optim, tC)
    if only != "ours":
        import torch
        import torch.nn.functional as F
        from torch.distributions import Categorical

        torch.set_num_threads(1)  # as benchmarks/eager.py: these ops are too small to split
        libs["torch"] = (torch, torch.nn, F, torch.optim, Categorical)
    return libs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--only", choices=("ours", "torch"))
    p.add_argument("--rounds", type=int, default=5, help="timed episodes of each (interleaved)")
    p.add_argument("--warmup", type=int, default=3, help="untimed episodes first")
    p.add_argument("--pieces", action="store_true", help="also time a step's pieces")
    p.add_argument(
        "--gc-freeze",
        action="store_true",
        help="gc.freeze() after the imports: the cyclic collector skips what they made",
    )
    args = p.parse_args()
    libs = _libs(args.only)
    if args.gc_freeze:
        import gc

        gc.collect()
        gc.freeze()
    episodes = {name: _agent(*mods) for name, mods in libs.items()}
    for ep in episodes.values():
        for _ in range(args.warmup):
            ep({})
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in libs}
    for _ in range(args.rounds):
        for name, ep in episodes.items():
            t: dict[str, float] = {}
            ep(t)
            runs[name].append(t)

    print(f"# RL episode benchmark, {datetime.datetime.now().isoformat(timespec='seconds')}")
    print(
        f"# machine: {platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, load {os.getloadavg()[0]:.1f}"
    )
    print(f"# command: {' '.join([os.path.basename(sys.executable), *sys.argv])}")
    print(
        f"# median of {args.rounds} interleaved episodes of {STEPS} steps, after "
        f"{args.warmup}; torch with 1 thread" + ("; gc.freeze()" if args.gc_freeze else "")
    )
    names = list(libs)
    both = len(names) == 2
    print(
        "| phase | "
        + " | ".join(f"{n} (ms)" for n in names)
        + (" | ours/torch |" if both else " |")
    )
    print("|---" * (len(names) + 1 + both) + "|")
    for phase in ("steps", "backward", "optimizer"):
        med = {n: statistics.median(r[phase] for r in runs[n]) for n in names}
        ratio = f" | {med['ours'] / med['torch']:.2f}x" if both else ""
        print(f"| {phase} | " + " | ".join(f"{med[n]:.1f}" for n in names) + ratio + " |")
    if args.pieces:
        pieces = {
            name: _pieces(mods[0], mods[1], mods[2], mods[4], 600) for name, mods in libs.items()
        }
        print()
        print(
            "| a step's piece | "
            + " | ".join(f"{n} (us)" for n in names)
            + (" | ours/torch |" if both else " |")
        )
        print("|---" * (len(names) + 1 + both) + "|")
        for piece in pieces[names[0]]:
            cells = " | ".join(f"{pieces[n][piece]:.1f}" for n in names)
            ratio = f" | {pieces['ours'][piece] / pieces['torch'][piece]:.2f}x" if both else ""
            print(f"| {piece} | {cells}{ratio} |")


if __name__ == "__main__":
    main()
