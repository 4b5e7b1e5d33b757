"""Process start-up benchmark: a fresh Python process that imports the library and runs one op.

Every RPC worker, process-group rank and spawned job starts this way, so its cost is paid
once per process. Measured for both, interleaved, in the same run:

- ours: ``import tensorplay_jax.rpc`` and one ``jax.numpy`` add, blocked until ready;
- torch: ``import torch.distributed.rpc`` and one add.

It reports the median wall time and the median CPU time (user + system, from the
child's resource usage) of each, and the versions of ``jax``, ``jaxlib``, ``numpy`` and
``ml_dtypes``: the import cost of JAX depends mostly on ``ml_dtypes`` (0.7 registers its
numpy ufunc loops in quadratic time), so run it once per version to compare.

Usage::

    python benchmarks/startup.py                # both, 7 rounds
    python benchmarks/startup.py --only ours --rounds 11
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import resource
import statistics
import subprocess
import sys

PROGRAMS = {
    "ours": "import tensorplay_jax.rpc, jax.numpy as jnp; (jnp.ones(2) + 1).block_until_ready()",
    "torch": "import torch, torch.distributed.rpc; torch.ones(2) + 1",
}


def run_once(code: str) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one fresh interpreter running ``code``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = datetime.datetime.now()
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
    wall = (datetime.datetime.now() - t0).total_seconds()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def versions() -> str:
    code = (
        "import importlib.metadata as m;"
        "print(', '.join(f'{p} {m.version(p)}' for p in ('jax', 'jaxlib', 'numpy', 'ml_dtypes')))"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=sorted(PROGRAMS))
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    names = [args.only] if args.only else list(PROGRAMS)
    results: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
    for name in names:  # warm the file cache once, untimed
        run_once(PROGRAMS[name])
    for _ in range(args.rounds):
        for name in names:
            results[name].append(run_once(PROGRAMS[name]))
    load = os.getloadavg()[0]
    print(f"# {datetime.date.today()} {platform.node()} ({os.cpu_count()} cores, load {load:.1f})")
    print(f"# python {platform.python_version()}; {versions().strip()}")
    print(f"# command: python benchmarks/startup.py {' '.join(sys.argv[1:])}".rstrip())
    print("| program | median wall (s) | median CPU (s) |")
    print("|---|---|---|")
    for name, runs in results.items():
        wall = statistics.median(w for w, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        print(f"| {name} | {wall:.2f} | {cpu:.2f} |")


if __name__ == "__main__":
    main()
