"""The ported RPC tutorials on tensorplay_jax beside the same files on torch.

Each program of ``examples/tutorials/`` chooses its imports from
``TUTORIAL_BACKEND`` (``tensorplay_jax`` or ``torch``), so the very same file, with
the same arguments, data and sizes, runs on both. This script runs each one as a
user would (a fresh ``python`` command; the parameter server one process per
rank), interleaved (ours, torch, ours, torch, ...) so both see the same machine
load, and prints a markdown table of the median wall time of each, their ratio,
and the CPU seconds (user + system, all processes) of each.

Two columns are ours:

- ``ours, first``: every run starts with no compiled code, as a first run
  does: the per-user compilation cache (``runtime.compile_cache``) is an empty
  folder made for the run, which its processes then share, so a program one
  worker compiled is loaded by the others (only workers that meet it at the
  same moment compile it each);
- ``ours, rerun``: the per-user cache as a user's second run of the same
  program finds it, filled by one untimed run first.

``--cache-off`` adds the column ``ours, off``: both caches turned off
(``TENSORPLAY_JAX_COMPILATION_CACHE=0``, ``TENSORPLAY_JAX_JOB_COMPILATION_CACHE=0``),
every process compiling everything it runs, interleaved with the others.

``--breakdown`` instead runs each tutorial ``--reps`` times per column
(ours on a first run, ours on a rerun, torch; interleaved) with
``benchmarks/_phases/sitecustomize.py`` loaded in every process, and prints
where the seconds go: per phase (start-up, importing the library,
``init_rpc``, JAX's tracing, lowering, XLA compilation and cache reads,
``shutdown``, and the rest: the program's own work), summed over the
program's processes (median of the runs), beside the wall time.

``--compile-seconds`` instead runs each tutorial once on ours with JAX's
``JAX_LOG_COMPILES=1`` and sums, over all its processes, the seconds JAX reports
for tracing, lowering and XLA compilation: the part of ``ours`` that a warm
persistent cache removes.

torch needs to be importable (``--torch-path`` is put first on its
``PYTHONPATH``). Both run on the CPU (``JAX_PLATFORMS=cpu``; torch's CPU build).

Usage::

    python benchmarks/tutorials.py                        # all seven, 3 repetitions
    python benchmarks/tutorials.py --reps 5 --only rl,rnn
    python benchmarks/tutorials.py --no-rerun             # skip the ``ours, rerun`` column
    python benchmarks/tutorials.py --torch-path /tmp/torchlib

The parameter server runs with one trainer (``--world_size 2``): with two, the
tutorial's trainers race (one's optimizer step writes the parameters in place
while the other's backward still needs them), which torch reports as an error
in some runs. The pipeline runs ``--splits 1,4`` (two spawns of three processes); the
DDP + RPC hybrid runs ``--epochs 10`` (two trainers, a parameter server, a master).

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
  and a numpy CartPole (gymnasium's dynamics and API, ``cartpole.py``) are written in
  the files and used by both backends; ``.cuda()`` / ``cuda:N`` are the CPU (``clone()``
  where the program relies on the copy ``.cuda()`` makes); sizes are small and
  bounded by flags (``--num_batches``, ``--max-episodes``, ``--splits``, ``--epochs``);
- the DDP + RPC hybrid replays batches drawn once from a seed (upstream draws new
  ones each epoch) and meets on ``MASTER_PORT`` and ``MASTER_PORT + 2``.
"""

from __future__ import annotations

import argparse
import compileall
import datetime
import json
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
    "batch_rl": ("rpc_batch_rl.py", [], 0),
    "rnn": ("rpc_rnn.py", [], 0),
    "pipeline": ("rpc_pipeline.py", ["--splits", "1,4"], 0),
    "ddp_hybrid": ("rpc_ddp_hybrid.py", ["--epochs", "10"], 0),
}
TIMEOUT_S = 900.0
_COMPILE_LOG = re.compile(
    r"Finished (?:tracing \+ transforming|jaxpr to MLIR module conversion|XLA compilation)"
    r".* in ([0-9.eE+-]+) sec"
)


def _env(backend: str, torch_path: str, cache: str | None) -> dict[str, str]:
    """A run's variables; ``cache``: the per-user cache folder of ours (None: both caches off)."""
    env = dict(os.environ, TUTORIAL_BACKEND=backend, JAX_PLATFORMS="cpu")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    for k in [k for k in env if k.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE"))]:
        env.pop(k)
    paths = [str(REPO)] + ([torch_path] if backend == "torch" and torch_path else [])
    env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    if backend == "torch":
        return env
    if cache is None:
        env["TENSORPLAY_JAX_COMPILATION_CACHE"] = "0"
        env["TENSORPLAY_JAX_JOB_COMPILATION_CACHE"] = "0"
    else:
        env["TENSORPLAY_JAX_CACHE_DIR"] = cache
    return env


def write_bytecode() -> None:
    """Compile the package's modules to bytecode once, before any timed run.

    pip writes an installed wheel's bytecode (torch's) when it installs it; a source
    checkout gets its bytecode on the first import, unless ``PYTHONDONTWRITEBYTECODE``
    is set, and then every process of every run compiles the package from source
    while torch's load theirs. Writing it here makes both start as installed code.
    """
    compileall.compile_dir(REPO / "tensorplay_jax", quiet=1, workers=0)


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
        with tempfile.TemporaryDirectory(prefix="tutorials-jax-cache-") as empty:
            env = dict(_env("tensorplay_jax", "", empty), JAX_LOG_COMPILES="1")
            wall, cpu = run_once(name, env, outs)
        found = [float(m) for o in outs for m in _COMPILE_LOG.findall(o)]
        n_xla = sum(o.count("Finished XLA compilation") for o in outs)
        print(f"| {name} | {wall:.1f} | {cpu:.1f} | {n_xla} | {sum(found):.1f} |", flush=True)


PHASES = ["start", "import", "init_rpc", "trace", "lower", "compile", "cache_load", "shutdown"]


def _phases_of_run(name: str, env: dict[str, str]) -> tuple[float, list[dict[str, float]]]:
    """One run of ``name`` with the phase recorder: its wall time and each process's phases."""
    with tempfile.TemporaryDirectory(prefix="tutorials-phases-") as out:
        path = os.pathsep.join([str(REPO / "benchmarks" / "_phases"), env["PYTHONPATH"]])
        wall, _ = run_once(name, dict(env, PYTHONPATH=path, TPJ_PHASES_DIR=out))
        runs = [json.loads(f.read_text())["seconds"] for f in Path(out).glob("*.json")]
    for r in runs:
        r["own work"] = r["total"] - sum(r.get(k, 0.0) for k in PHASES)
    return wall, sorted(runs, key=lambda r: -r["own work"])


def breakdown(names: list[str], reps: int, torch_path: str) -> None:
    """Print, per tutorial and column, each process's seconds by phase (the median run's)."""
    print(f"# where the seconds go, {datetime.datetime.now().isoformat(timespec='seconds')}")
    print(f"# of {reps} interleaved runs per column, the run of median wall time: each process")
    print("# (busiest first; shutdown includes waiting for the others) and all of them summed")
    cols = ["ours, first", "ours, rerun", "torch"]
    keys = ["total", *PHASES, "own work"]
    print("| tutorial | column | wall | process | " + " | ".join(keys) + " |")
    print("|" + "---|" * (len(keys) + 4))
    for name in names:
        rerun = tempfile.mkdtemp(prefix="tutorials-jax-cache-")
        try:
            env = {
                "ours, first": _env("tensorplay_jax", torch_path, None),
                "ours, rerun": _env("tensorplay_jax", torch_path, rerun),
                "torch": _env("torch", torch_path, None),
            }
            run_once(name, env["ours, rerun"])  # fills the rerun's cache, untimed
            got: dict[str, list[tuple[float, list[dict[str, float]]]]] = {c: [] for c in cols}
            for rep in range(reps):
                for col in cols if rep % 2 == 0 else cols[::-1]:
                    with tempfile.TemporaryDirectory(prefix="tutorials-jax-cache-") as empty:
                        run_env = env[col]
                        if col == "ours, first":
                            run_env = _env("tensorplay_jax", torch_path, empty)
                        got[col].append(_phases_of_run(name, run_env))
        finally:
            shutil.rmtree(rerun, ignore_errors=True)
        for col in cols:
            wall, procs = sorted(got[col], key=lambda r: r[0])[len(got[col]) // 2]
            summed = {k: sum(p.get(k, 0.0) for p in procs) for k in keys}
            for label, p in [*((str(i), p) for i, p in enumerate(procs)), ("all", summed)]:
                cells = " | ".join(f"{p.get(k, 0.0):.2f}" for k in keys)
                print(f"| {name} | {col} | {wall:.2f} | {label} | {cells} |", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--reps", type=int, default=3, help="timed runs of each, per column")
    p.add_argument("--only", default=",".join(CASES), help="comma-separated tutorial names")
    p.add_argument("--torch-path", default="/tmp/torchlib", help="where torch is installed")
    p.add_argument("--no-rerun", action="store_true", help="skip the 'ours, rerun' column")
    p.add_argument(
        "--cache-off",
        action="store_true",
        help="add the column 'ours, off': ours with no compilation cache at all",
    )
    p.add_argument(
        "--compile-seconds", action="store_true", help="only: JAX's compile seconds in one run"
    )
    p.add_argument(
        "--breakdown", action="store_true", help="only: where each run's seconds go, by phase"
    )
    args = p.parse_args()
    write_bytecode()
    names = [n for n in args.only.split(",") if n]
    unknown = sorted(set(names) - set(CASES))
    if unknown:
        p.error(f"--only: unknown tutorial(s) {unknown}; choose from {sorted(CASES)}")
    if args.compile_seconds:
        compile_seconds(names)
        return
    if args.breakdown:
        breakdown(names, args.reps, args.torch_path)
        return

    load_before = os.getloadavg()
    started = datetime.datetime.now().isoformat(timespec="seconds")
    rerun_dir = None if args.no_rerun else tempfile.mkdtemp(prefix="tutorials-jax-cache-")
    columns = {
        "ours, first": _env("tensorplay_jax", args.torch_path, "(a new folder each run)"),
        "torch": _env("torch", args.torch_path, None),
    }
    if args.cache_off:
        columns["ours, off"] = _env("tensorplay_jax", args.torch_path, None)
    if rerun_dir:
        columns["ours, rerun"] = _env("tensorplay_jax", args.torch_path, rerun_dir)
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    try:
        for name in names:
            if rerun_dir:
                run_once(name, columns["ours, rerun"])  # fills the cache, untimed
            for rep in range(args.reps):
                order = list(columns) if rep % 2 == 0 else list(reversed(columns))
                for col in order:
                    with tempfile.TemporaryDirectory(prefix="tutorials-jax-cache-") as empty:
                        env = columns[col]
                        if col == "ours, first":
                            env = dict(env, TENSORPLAY_JAX_CACHE_DIR=empty)
                        results.setdefault((name, col), []).append(run_once(name, env))
                    w, c = results[(name, col)][-1]
                    print(f"# {name} {col} rep {rep}: {w:.1f} s wall, {c:.1f} s CPU", flush=True)
    finally:
        if rerun_dir:
            shutil.rmtree(rerun_dir, ignore_errors=True)

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
    ours = [c for c in cols if c != "torch"]
    head = ["tutorial", *(f"{c} s" for c in cols), *(f"{c}/torch" for c in ours)]
    head += [f"{c} CPU s" for c in cols]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for name in names:
        walls = [f"{med(name, c, 0):.1f}" for c in cols]
        ratios = [f"{med(name, c, 0) / med(name, 'torch', 0):.2f}x" for c in ours]
        cpus = [f"{med(name, c, 1):.1f}" for c in cols]
        print("| " + " | ".join([name, *walls, *ratios, *cpus]) + " |")


if __name__ == "__main__":
    main()
