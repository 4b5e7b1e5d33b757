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
    python benchmarks/rl_episode.py --served --rounds 5
"""

from __future__ import annotations

import argparse
import datetime
import json
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


def _step(Categorical: Any, policy: Any, buffer: Any, state: Any, saved: list) -> int:
    """One step of the example's agent: the state into its buffer, the policy on a copy,
    a sampled action (returned), its log-probability appended to ``saved``."""
    buffer[0].copy_(state)
    m = Categorical(policy(buffer.clone()))
    action = m.sample()
    saved.append(m.log_prob(action).t()[0])
    return action[0].item()


def _loss(lib: Any, saved: list) -> Any:
    """The episode's loss over its ``STEPS`` saved log-probabilities (unit returns)."""
    return (-lib.stack(saved) * lib.ones(STEPS, 1)).sum()


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
            _step(Categorical, policy, buffer, state, saved)
        mid = time.perf_counter()
        _loss(lib, saved).backward()
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


_SERVED: dict[str, Any] = {}  # the agent's state in its process (--served)


def _served_setup(name: str) -> None:
    """In the agent: build the policy, its optimizer and the step buffer."""
    lib, nn, F, optim, Categorical = _libs(name)[name]
    policy = _policy(lib, nn, F)
    _SERVED.update(
        lib=lib,
        Categorical=Categorical,
        policy=policy,
        optimizer=optim.Adam(policy.parameters(), lr=1e-2),
        buffer=lib.zeros(1, 1, 4),
        saved=[],
        cpu=0.0,
    )


def _served_step(state: Any) -> int:
    """In the agent: one step of the example's agent on ``state`` (a served call)."""
    c = time.thread_time()
    a = _SERVED
    out = _step(a["Categorical"], a["policy"], a["buffer"], state, a["saved"])
    a["cpu"] += time.thread_time() - c
    return out


def _served_finish() -> dict[str, float]:
    """In the agent: the episode's backward and optimizer step; the phases' CPU ms."""
    a, lib = _SERVED, _SERVED["lib"]
    c = time.thread_time()
    _loss(lib, a["saved"]).backward()
    mid = time.thread_time()
    a["optimizer"].step()
    a["optimizer"].zero_grad()
    end = time.thread_time()
    steps_cpu, a["saved"], a["cpu"] = a["cpu"], [], 0.0
    return {
        "agent cpu: steps": steps_cpu * 1e3,
        "agent cpu: backward": (mid - c) * 1e3,
        "agent cpu: optimizer": (end - mid) * 1e3,
    }


def _served_worker(rank: int, name: str, rounds: int, warmup: int, out: str, port: str) -> None:
    """Rank 0 serves the agent; rank 1 drives ``warmup + rounds`` episodes, writes ``out``."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    if name == "torch":
        import torch
        import torch.distributed.rpc as rpc

        torch.set_num_threads(1)
    else:
        import tensorplay_jax.distributed.rpc as rpc
    rpc.init_rpc(f"w{rank}", rank=rank, world_size=2)
    if rank == 1:
        lib = _libs(name)[name][0]
        rpc.rpc_sync("w0", _served_setup, args=(name,))
        states = np.random.default_rng(0).standard_normal((STEPS, 4)).astype(np.float32)
        runs = []
        for r in range(warmup + rounds):
            start = time.perf_counter()
            for step in range(STEPS):
                state = lib.from_numpy(states[step]).float().unsqueeze(0)
                rpc.rpc_sync("w0", _served_step, args=(state,))
            mid = time.perf_counter()
            got = rpc.rpc_sync("w0", _served_finish)
            got["steps (round trips)"] = (mid - start) * 1e3
            got["backward + optimizer (round trip)"] = (time.perf_counter() - mid) * 1e3
            if r >= warmup:
                runs.append(got)
        with open(out, "w") as f:
            json.dump(runs, f)
    rpc.shutdown()


def _served(rounds: int, warmup: int) -> None:
    """--served: each library's agent inside RPC calls, spawns alternating; print medians."""
    import tempfile

    import tensorplay_jax.rpc as tp_mp

    names = ["ours", "torch"]
    runs: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(rounds):
            for name in names:
                out = os.path.join(tmp, f"{name}{i}.json")
                port = str(29600 + 2 * i + names.index(name))
                args = (name, 1, warmup, out, port)
                if name == "torch":
                    import torch.multiprocessing as mp

                    mp.spawn(_served_worker, args=args, nprocs=2, join=True)
                else:
                    tp_mp.spawn(_served_worker, args=args, nprocs=2, join=True)
                with open(out) as f:
                    runs[name].extend(json.load(f))
    print(f"# RL episode served over RPC, {datetime.datetime.now().isoformat(timespec='seconds')}")
    print(
        f"# machine: {platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, load {os.getloadavg()[0]:.1f}"
    )
    print(f"# command: {' '.join([os.path.basename(sys.executable), *sys.argv])}")
    print(
        f"# median of {rounds} episodes of {STEPS} served steps per library, each in a "
        "spawn of its own (alternating); torch with 1 thread"
    )
    print("| phase (ms) | ours | torch | ours/torch |")
    print("|---|---|---|---|")
    for phase in runs["ours"][0]:
        med = {n: statistics.median(r[phase] for r in runs[n]) for n in names}
        ratio = med["ours"] / med["torch"]
        print(f"| {phase} | {med['ours']:.1f} | {med['torch']:.1f} | {ratio:.2f}x |")


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
        "--served", action="store_true", help="the agent inside RPC calls, two processes each"
    )
    p.add_argument(
        "--gc-freeze",
        action="store_true",
        help="gc.freeze() after the imports: the cyclic collector skips what they made",
    )
    args = p.parse_args()
    if args.served:
        _served(args.rounds, args.warmup)
        return
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
