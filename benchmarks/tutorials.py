"""The ported RPC tutorials on tensorplay_jax beside the same files on torch.

Each program of ``examples/tutorials/`` chooses its imports from
``TUTORIAL_BACKEND`` (``tensorplay_jax`` or ``torch``), so the very same file, with
the same arguments, data and sizes, runs on both. This script runs each one as a
user would (a fresh ``python`` command; the parameter server one process per
rank), interleaved (ours, torch, ours, torch, ...) so both see the same machine
load, and prints a markdown table of the median wall time of each, their ratio,
and the CPU seconds (user + system, all processes) of each.

Two columns are ours:

- ``ours``: every run starts with no compiled code, as a first run does: the
  workers an ``rpc.spawn`` starts share one compilation cache that the spawning
  process makes (``runtime.compile_cache``): a program one worker (or an earlier
  spawn) compiled is loaded by the others, and only workers that meet it at the
  same moment compile it each (the parameter server tutorial starts its ranks as
  separate commands, which share nothing);
- ``ours, cache``: JAX's persistent compilation cache on, in a directory this
  script makes and fills with one untimed run first (what every run after a
  user's first one sees with ``JAX_COMPILATION_CACHE_DIR`` set and
  ``JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0``).

``--job-cache-off`` adds the column ``ours, off``: ours with that shared cache
turned off (``TENSORPLAY_JAX_JOB_COMPILATION_CACHE=0``), every process compiling
everything it runs, interleaved with the others.

``--compile-seconds`` instead runs each tutorial once on ours with JAX's
``JAX_LOG_COMPILES=1`` and sums, over all its processes, the seconds JAX reports
for tracing, lowering and XLA compilation: the part of ``ours`` that a warm
persistent cache removes.

torch needs to be importable (``--torch-path`` is put first on its
``PYTHONPATH``). Both run on the CPU (``JAX_PLATFORMS=cpu``; torch's CPU build).

Usage::

    python benchmarks/tutorials.py                        # all five, 3 repetitions
    python benchmarks/tutorials.py --reps 5 --only rl,rnn
    python benchmarks/tutorials.py --no-cache             # skip the ``ours, cache`` column
    python benchmarks/tutorials.py --torch-path /tmp/torchlib

The parameter server runs with one trainer (``--world_size 2``): with two, the
tutorial's trainers race (one's optimizer step writes the parameters in place
while the other's backward still needs them), which torch reports as an error
in some runs. The pipeline runs ``--splits 1,4`` (two spawns of three processes).

Measured tables, with their date, machine and command: ``docs/benchmarks.md``.

What still differs between a tutorial and its upstream program (each line is
marked ``# port:`` in the file; the backend block is the one place the two
backends differ):

- the imports (``TUTORIAL_BACKEND``); ``torch.multiprocessing`` is
  ``tensorplay_jax.rpc`` (its ``spawn``) or the standard ``multiprocessing``;
- ``optim`` is ``tensorplay_jax.optim`` (``optim.SGD``, ``optim.Adam`` and
  ``DistributedOptimizer(optim.SGD, rrefs, lr=lr)`` as upstream);
- ``torch.from_numpy`` is ``tensor``;
- ``torch.LongTensor(n, m)`` (uninitialized memory, then ``% k`` or
  ``.random_``) is ``randint``, on both backends (JAX has no uninitialized memory);
- torchvision and gymnasium are not installed: synthetic MNIST and a small
  ``DataLoader``, a linear stand-in for ``resnet50``, torchvision's ``Bottleneck``
  and a numpy CartPole (gymnasium's dynamics and API) are written in the files and
  used by both backends; ``.cuda()`` / ``cuda:N`` are the CPU; sizes are small and
  bounded by flags (``--num_batches``, ``--max-episodes``, ``--splits``).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tensorplay_jax.runtime.launch import free_port

REPO = Path(__file__).resolve().parent.parent
TUTORIALS = REPO / "examples" / "tutorials"

# name: (script, arguments, ranks started by us (0: the script spawns its own))
CASES: dict[str, tuple[str, list[str], int]] = {
    "parameter_server": ("rpc_parameter_server.py", ["--num_batches", "20"], 2),
    "batch_parameter_server": ("rpc_batch_parameter_server.py", [], 0),
    "rl": ("rpc_rl.py", ["--world-size", "3", "--max-episodes", "30"], 0),
    "rnn": ("rpc_rnn.py", [], 0),
    "pipeline": ("rpc_pipeline.py", ["--splits", "1,4"], 0),
}
TIMEOUT_S = 900.0
_COMPILE_LOG = re.compile(
    r"Finished (?:tracing \+ transforming|jaxpr to MLIR module conversion|XLA compilation)"
    r".* in ([0-9.eE+-]+) sec"
)


def _env(backend: str, torch_path: str, cache: str | None) -> dict[str, str]:
    env = dict(os.environ, TUTORIAL_BACKEND=backend, JAX_PLATFORMS="cpu")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    paths = [str(REPO)] + ([torch_path] if backend == "torch" and torch_path else [])
    env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    if cache is not None:
        env["JAX_COMPILATION_CACHE_DIR"] = cache
        env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
        env["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"
    return env


def _commands(name: str) -> list[list[str]]:
    script, args, ranks = CASES[name]
    base = [sys.executable, str(TUTORIALS / script), *args]
    if not ranks:
        return [base]
    port = str(free_port())
    return [
        [*base, "--rank", str(r), "--world_size", str(ranks), "--master_port", port]
        for r in range(ranks)
    ]


def run_once(
    name: str, env: dict[str, str], outputs: list[str] | None = None
) -> tuple[float, float]:
    """One run of tutorial ``name``: (wall seconds, CPU seconds of all its processes)."""
    cmds = _commands(name)
    if not CASES[name][2]:
        env = dict(env, MASTER_PORT=str(free_port()))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    procs = [
        subprocess.Popen(c, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for c in cmds
    ]
    outs = []
    try:
        for p in reversed(procs):  # the server (rank 0) waits for the others
            outs.append(p.communicate(timeout=TIMEOUT_S)[0])
    finally:
        for p in procs:
            p.kill()
    wall = time.perf_counter() - t
    if outputs is not None:
        outputs.extend(outs)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    bad = [p.returncode for p in procs if p.returncode != 0]
    if bad:
        raise SystemExit(f"{name} on {env['TUTORIAL_BACKEND']} failed:\n" + "\n".join(outs))
    return wall, cpu


def compile_seconds(names: list[str]) -> None:
    """Print, per tutorial, one run's wall and CPU seconds and JAX's compile seconds in it."""
    print(f"# JAX_LOG_COMPILES=1, one run each, {datetime.datetime.now().isoformat()}")
    print("| tutorial | wall s | CPU s | XLA compilations | compiling s (wall, all processes) |")
    print("|---|---|---|---|---|")
    for name in names:
        outs: list[str] = []
        env = dict(_env("tensorplay_jax", "", None), JAX_LOG_COMPILES="1")
        wall, cpu = run_once(name, env, outs)
        found = [float(m) for o in outs for m in _COMPILE_LOG.findall(o)]
        n_xla = sum(o.count("Finished XLA compilation") for o in outs)
        print(f"| {name} | {wall:.1f} | {cpu:.1f} | {n_xla} | {sum(found):.1f} |", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--reps", type=int, default=3, help="timed runs of each, per column")
    p.add_argument("--only", default=",".join(CASES), help="comma-separated tutorial names")
    p.add_argument("--torch-path", default="/tmp/torchlib", help="where torch is installed")
    p.add_argument("--no-cache", action="store_true", help="skip the 'ours, cache' column")
    p.add_argument(
        "--job-cache-off",
        action="store_true",
        help="add the column 'ours, off': ours without the job's shared compilation cache",
    )
    p.add_argument(
        "--compile-seconds", action="store_true", help="only: JAX's compile seconds in one run"
    )
    args = p.parse_args()
    names = [n for n in args.only.split(",") if n]
    unknown = sorted(set(names) - set(CASES))
    if unknown:
        p.error(f"--only: unknown tutorial(s) {unknown}; choose from {sorted(CASES)}")
    if args.compile_seconds:
        compile_seconds(names)
        return

    load_before = os.getloadavg()
    started = datetime.datetime.now().isoformat(timespec="seconds")
    cache_dir = None if args.no_cache else tempfile.mkdtemp(prefix="tutorials-jax-cache-")
    columns = {
        "ours": _env("tensorplay_jax", args.torch_path, None),
        "torch": _env("torch", args.torch_path, None),
    }
    if args.job_cache_off:
        columns["ours, off"] = dict(columns["ours"], TENSORPLAY_JAX_JOB_COMPILATION_CACHE="0")
    if cache_dir:
        columns["ours, cache"] = _env("tensorplay_jax", args.torch_path, cache_dir)
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    try:
        for name in names:
            if cache_dir:
                run_once(name, columns["ours, cache"])  # fills the cache, untimed
            for rep in range(args.reps):
                order = list(columns) if rep % 2 == 0 else list(reversed(columns))
                for col in order:
                    results.setdefault((name, col), []).append(run_once(name, columns[col]))
                    w, c = results[(name, col)][-1]
                    print(f"# {name} {col} rep {rep}: {w:.1f} s wall, {c:.1f} s CPU", flush=True)
    finally:
        if cache_dir:
            shutil.rmtree(cache_dir, ignore_errors=True)

    def med(name: str, col: str, i: int) -> float:
        return statistics.median(r[i] for r in results[(name, col)])

    print(f"# tutorials benchmark, {started}")
    print(
        f"# machine: {platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}; load average before "
        f"{' '.join(f'{x:.1f}' for x in load_before)}, after "
        f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )
    print(f"# command: {' '.join([os.path.basename(sys.executable), *sys.argv])}")
    print(f"# median of {args.reps} interleaved runs; CPU = user + system of all its processes")
    cols = list(columns)
    head = ["tutorial", *(f"{c} s" for c in cols), "ours/torch"]
    if args.job_cache_off:
        head.append("ours, off/torch")
    if cache_dir:
        head.append("ours, cache/torch")
    head += [f"{c} CPU s" for c in cols]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for name in names:
        walls = [f"{med(name, c, 0):.1f}" for c in cols]
        ratios = [f"{med(name, 'ours', 0) / med(name, 'torch', 0):.2f}x"]
        if args.job_cache_off:
            ratios.append(f"{med(name, 'ours, off', 0) / med(name, 'torch', 0):.2f}x")
        if cache_dir:
            ratios.append(f"{med(name, 'ours, cache', 0) / med(name, 'torch', 0):.2f}x")
        cpus = [f"{med(name, c, 1):.1f}" for c in cols]
        print("| " + " | ".join([name, *walls, *ratios, *cpus]) + " |")


if __name__ == "__main__":
    main()
