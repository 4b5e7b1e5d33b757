"""Benchmark: tensorplay_jax.collectives beside hand-written raw ``jax.lax`` programs.

For each collective, forward and value-and-gradient, jitted, on 8 virtual CPU devices
at 4 KiB, 1 MiB and 32 MiB per device: the median time of ours beside a raw lax
program doing the same communication (for the gradient: the forward primitive
followed by the primitive its backward needs), their ratio, and whether the two
compiled programs hold the same collective operations.

Run:  python benchmarks/collectives.py [--sizes 4KiB,1MiB,32MiB] [--only all_reduce,...]
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import argparse
import collections
import platform
import re
import statistics
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

from tensorplay_jax import collectives as C

A = "i"
N = 8
SRC = 3


def _mask(v):
    return jnp.where(lax.axis_index(A) == SRC, v, jnp.zeros_like(v))


# name -> (ours(x), raw forward(x), raw backward(ct), per-rank input shape from elements)
ROWS: dict[str, tuple[Callable, Callable, Callable, Callable[[int], tuple]]] = {
    "all_reduce": (
        lambda x: C.all_reduce(x, A),
        lambda x: lax.psum(x, A),
        lambda ct: lax.psum(ct, A),
        lambda e: (e,),
    ),
    "broadcast": (
        lambda x: C.broadcast(x, SRC, A),
        lambda x: lax.psum(_mask(x), A),
        lambda ct: _mask(lax.psum(ct, A)),
        lambda e: (e,),
    ),
    "reduce": (
        lambda x: C.reduce(x, SRC, A),
        lambda x: _mask(lax.psum(x, A)),
        lambda ct: lax.psum(_mask(ct), A),
        lambda e: (e,),
    ),
    "gather": (
        lambda x: C.gather(x, SRC, A),
        lambda x: _mask(lax.all_gather(x, A)),
        lambda ct: lax.psum_scatter(_mask(ct), A),
        lambda e: (e,),
    ),
    "scatter": (
        lambda x: C.scatter(x, SRC, A),
        lambda x: lax.psum_scatter(_mask(x), A),
        lambda ct: _mask(lax.all_gather(ct, A)),
        lambda e: (N, e // N),
    ),
    "reduce_scatter": (
        lambda x: C.reduce_scatter(x, A),
        lambda x: lax.psum_scatter(x, A),
        lambda ct: lax.all_gather(ct, A),
        lambda e: (N, e // N),
    ),
    "all_gather": (
        lambda x: C.all_gather(x, A),
        lambda x: lax.all_gather(x, A),
        lambda ct: lax.psum_scatter(ct, A),
        lambda e: (e,),
    ),
    "all_gather_single": (
        lambda x: C.all_gather_single(x, A),
        lambda x: lax.all_gather(x, A, tiled=True),
        lambda ct: lax.psum_scatter(ct, A, tiled=True),
        lambda e: (e,),
    ),
    "all_to_all": (
        lambda x: C.all_to_all(x, A),
        lambda x: lax.all_to_all(x, A, 0, 0, tiled=True),
        lambda ct: lax.all_to_all(ct, A, 0, 0, tiled=True),
        lambda e: (e,),
    ),
    "all_to_all_single": (
        lambda x: C.all_to_all_single(x, A),
        lambda x: lax.all_to_all(x, A, 0, 0, tiled=True),
        lambda ct: lax.all_to_all(ct, A, 0, 0, tiled=True),
        lambda e: (e,),
    ),
}

COLLECTIVE_OPS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")


def parse_size(s: str) -> int:
    m = re.fullmatch(r"(\d+)\s*([KMG]i?B)", s.strip())
    if not m:
        raise SystemExit(f"bad size {s!r}; use e.g. 4KiB, 1MiB, 32MiB")
    return int(m.group(1)) * {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2)[0]]


def per_rank(fn: Callable, vma: bool) -> Callable:
    mesh = jax.make_mesh((N,), (A,), axis_types=(AxisType.Auto,))
    return jax.shard_map(
        lambda x: fn(x[0])[None], mesh=mesh, in_specs=P(A), out_specs=P(A), check_vma=vma
    )


def programs(name: str) -> dict[str, Callable]:
    ours, raw_fwd, raw_bwd, _ = ROWS[name]
    f_ours = per_rank(ours, vma=True)  # what users run: check_vma on (the default)
    f_raw = per_rank(raw_fwd, vma=False)
    b_raw = per_rank(raw_bwd, vma=False)

    def ours_vg(x, ct):
        y, vjp = jax.vjp(f_ours, x)
        return y, vjp(ct)[0]

    return {
        "fwd-ours": jax.jit(f_ours),
        "fwd-raw": jax.jit(f_raw),
        "vg-ours": jax.jit(ours_vg),
        "vg-raw": jax.jit(lambda x, ct: (f_raw(x), b_raw(ct))),
    }


def collective_counts(compiled) -> dict[str, int]:
    text = compiled.as_text()
    return {op: len(re.findall(rf"= \S+ {op}(-start)?\(", text)) for op in COLLECTIVE_OPS}


def time_pair(fa: Callable, fb: Callable, args_a, args_b, reps: int) -> tuple[float, float]:
    """Median seconds of ``fa`` and ``fb``, runs interleaved so drift hits both alike."""
    for _ in range(2):
        jax.block_until_ready(fa(*args_a))
        jax.block_until_ready(fb(*args_b))
    ta, tb = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(fa(*args_a))
        t1 = time.perf_counter()
        jax.block_until_ready(fb(*args_b))
        t2 = time.perf_counter()
        ta.append(t1 - t0)
        tb.append(t2 - t1)
    return statistics.median(ta), statistics.median(tb)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="4KiB,1MiB,32MiB")
    ap.add_argument("--only", default=",".join(ROWS))
    ap.add_argument("--reps", type=int, default=0, help="runs per timing (default by size)")
    opts = ap.parse_args()
    assert jax.device_count() >= N, f"need {N} devices; set XLA_FLAGS"
    sizes = [parse_size(s) for s in opts.sizes.split(",")]
    names = opts.only.split(",")

    print(
        f"# jax {jax.__version__}, {N} virtual CPU devices, {platform.machine()}, "
        f"{os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}"
    )
    print(
        "| collective | per-device | fwd ours (ms) | fwd raw (ms) | fwd ratio "
        "| value+grad ours (ms) | value+grad raw (ms) | vg ratio | same collectives |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    worst = collections.defaultdict(float)
    for size in sizes:
        elems = size // 4
        reps = opts.reps or (200 if size <= 64 << 10 else 30 if size <= 4 << 20 else 11)
        for name in names:
            shape = (N, *ROWS[name][3](elems))
            x = jnp.asarray(np.random.default_rng(0).standard_normal(shape), jnp.float32)
            progs = programs(name)
            y = progs["fwd-ours"](x)
            ct = jnp.ones_like(y)
            fo, fr = time_pair(progs["fwd-ours"], progs["fwd-raw"], (x,), (x,), reps)
            vo, vr = time_pair(progs["vg-ours"], progs["vg-raw"], (x, ct), (x, ct), reps)
            same = collective_counts(progs["vg-ours"].lower(x, ct).compile()) == collective_counts(
                progs["vg-raw"].lower(x, ct).compile()
            ) and collective_counts(progs["fwd-ours"].lower(x).compile()) == collective_counts(
                progs["fwd-raw"].lower(x).compile()
            )
            worst["fwd"] = max(worst["fwd"], fo / fr)
            worst["vg"] = max(worst["vg"], vo / vr)
            label = f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"
            print(
                f"| {name} | {label} | {fo * 1e3:.3f} | {fr * 1e3:.3f} | {fo / fr:.2f} "
                f"| {vo * 1e3:.3f} | {vr * 1e3:.3f} | {vo / vr:.2f} | {'yes' if same else 'NO'} |",
                flush=True,
            )
            del progs, x, y, ct
    print(f"\nworst ratio: forward {worst['fwd']:.2f}, value+grad {worst['vg']:.2f}")


if __name__ == "__main__":
    main()
