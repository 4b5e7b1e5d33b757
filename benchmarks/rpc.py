"""RPC benchmark: tensorplay_jax.rpc beside torch.distributed.rpc (TensorPipe), 2 workers.

Both workers run on this host, so ours uses its same-host transport (Unix
socket + shared-memory segments, like TensorPipe's shm channel); pass
``--transport tcp`` to measure the TCP link that other hosts use instead, or
``--transport grpc`` for the gRPC stream (what TLS jobs use).

Measures, in the same run for both:

- latency: mean round trip of ``rpc_sync`` echoing a 4-element float32 array;
- pipelined calls/s: ``rpc_async`` echo calls issued back to back, then ``wait_all``;
- bandwidth: echo of 1, 16, 64 and 256 MiB float32 arrays, reported as
  payload bytes / round-trip time (best of the repeats).

Usage::

    python benchmarks/rpc.py                # both, full table
    python benchmarks/rpc.py --only ours    # skip torch
    python benchmarks/rpc.py --sizes 1 64 --repeats 3
    python benchmarks/rpc.py --transport tcp    # ours over the cross-host TCP link
    python benchmarks/rpc.py --transport grpc   # ours over gRPC even on one host
    python benchmarks/rpc.py --profile  # the profiler's cost: ours, recording off vs on

``--profile`` measures ours only, with recording off and on in the same two
workers, in alternating rounds (off/on, then on/off, ...): each "on" round runs
inside ``profiler.trace()``, so both workers record every send, serve and reply;
starting the trace, its clock pings and merging the events at its end are
outside the timed loops. It prints the best round of each, and the cost.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def echo(x):
    return x


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _measure(rpc_sync, rpc_async, wait_all, make, sizes, repeats, n_lat, n_pipe) -> dict:
    res: dict = {}
    x = make(4)
    for _ in range(200):
        rpc_sync("w1", echo, (x,))
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(n_lat):
            rpc_sync("w1", echo, (x,))
        best = min(best, (time.perf_counter() - t) / n_lat)
    res["latency_us"] = best * 1e6
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        wait_all([rpc_async("w1", echo, (x,)) for _ in range(n_pipe)])
        best = min(best, time.perf_counter() - t)
    res["calls_per_s"] = n_pipe / best
    for mib in sizes:
        x = make(mib << 18)
        rpc_sync("w1", echo, (x,))
        best = float("inf")
        for _ in range(repeats):
            t = time.perf_counter()
            y = rpc_sync("w1", echo, (x,))
            best = min(best, time.perf_counter() - t)
            del y
        res[f"bw_{mib}MiB_MBps"] = (mib << 20) / best / 1e6
        del x
    return res


def _overhead(rpc, profiler, make, rounds: int, n_lat: int, n_pipe: int) -> dict:
    """Latency and calls/s with recording off and on, interleaved in the same workers."""
    x = make(4)
    for _ in range(200):
        rpc.rpc_sync("w1", echo, (x,))
    res: dict = {"off": {}, "on": {}}
    for r in range(rounds):
        for mode in ("off", "on") if r % 2 == 0 else ("on", "off"):
            with profiler.trace() if mode == "on" else contextlib.nullcontext():
                t = time.perf_counter()
                for _ in range(n_lat):
                    rpc.rpc_sync("w1", echo, (x,))
                lat = (time.perf_counter() - t) / n_lat * 1e6
                t = time.perf_counter()
                rpc.wait_all([rpc.rpc_async("w1", echo, (x,)) for _ in range(n_pipe)])
                cps = n_pipe / (time.perf_counter() - t)
            got = res[mode]
            got["latency_us"] = min(got.get("latency_us", float("inf")), lat)
            got["calls_per_s"] = max(got.get("calls_per_s", 0.0), cps)
    return res


def worker(
    impl: str, rank: int, port: int, sizes: list[int], repeats: int, out: str, profile: bool = False
) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    n_lat, n_pipe = 2000, 5000
    if impl == "torch":
        import torch
        import torch.distributed.rpc as rpc

        rpc.init_rpc(f"w{rank}", rank=rank, world_size=2)
        if rank == 0:
            res = _measure(
                rpc.rpc_sync,
                rpc.rpc_async,
                torch.futures.wait_all,
                lambda n: torch.ones(n, dtype=torch.float32),
                sizes,
                repeats,
                n_lat,
                n_pipe,
            )
            Path(out).write_text(json.dumps(res))
        rpc.shutdown()
    else:
        import numpy as np

        from tensorplay_jax import profiler
        from tensorplay_jax.distributed import rpc

        rpc.init_rpc(f"w{rank}", rank=rank, world_size=2)
        if rank == 0:

            def make(n):
                return np.ones(n, dtype=np.float32)

            if profile:
                res = _overhead(rpc, profiler, make, 2 * repeats, n_lat, n_pipe)
            else:
                res = _measure(
                    rpc.rpc_sync, rpc.rpc_async, rpc.wait_all, make, sizes, repeats, n_lat, n_pipe
                )
            Path(out).write_text(json.dumps(res))
        rpc.shutdown()


def run(
    impl: str, sizes: list[int], repeats: int, transport: str = "auto", profile: bool = False
) -> dict:
    port = _port()
    out = f"/tmp/tpj-bench-{impl}-{os.getpid()}.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu")
    if transport in ("tcp", "grpc"):
        env["TENSORPLAY_JAX_RPC_LOCAL"] = "0"
        env["TENSORPLAY_JAX_RPC_TCP"] = "1" if transport == "tcp" else "0"
    boot = (
        "import sys; from benchmarks.rpc import worker; "
        "worker(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), "
        "[int(s) for s in sys.argv[4].split(',')], int(sys.argv[5]), sys.argv[6], "
        "sys.argv[7] == '1')"
    )
    args = [impl, None, str(port), ",".join(map(str, sizes)), str(repeats), out, str(int(profile))]
    procs = []
    for rank in (0, 1):
        a = list(args)
        a[1] = str(rank)
        procs.append(subprocess.Popen([sys.executable, "-c", boot, *a], env=env, cwd=ROOT))
    for p in procs:
        if p.wait(timeout=900) != 0:
            raise SystemExit(f"{impl} benchmark worker failed")
    res = json.loads(Path(out).read_text())
    os.unlink(out)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=["ours", "torch"], default=None)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1, 16, 64, 256])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--transport", choices=["auto", "tcp", "grpc"], default="auto")
    ap.add_argument(
        "--profile", action="store_true", help="ours with recording off vs on (profiler.trace)"
    )
    a = ap.parse_args()
    if a.profile:
        res = run("ours", a.sizes, a.repeats, a.transport, True)
        print(f"{'metric':<14}{'off':>10}{'on':>10}{'cost':>8}  target")
        for k in ("latency_us", "calls_per_s"):
            off, on = res["off"][k], res["on"][k]
            cost = on / off - 1 if k == "latency_us" else off / on - 1
            print(f"{k:<14}{off:>10,.0f}{on:>10,.0f}{cost:>+8.1%}  <= +10%")
        return
    results = {}
    for impl in ("ours", "torch"):
        if a.only in (None, impl):
            results[impl] = run(impl, a.sizes, a.repeats, a.transport)
    keys = ["latency_us", "calls_per_s"] + [f"bw_{m}MiB_MBps" for m in a.sizes]
    print(f"{'metric':<18}{'tensorplay_jax':>16}{'torch':>12}{'ratio':>10}  target")
    for k in keys:
        o = results.get("ours", {}).get(k)
        t = results.get("torch", {}).get(k)
        ratio = f"{o / t:.2f}x" if o and t else "-"
        target = {"latency_us": "<= 0.80x", "calls_per_s": ">= 1.25x"}.get(
            k, ">= 1.00x" if k.startswith("bw_") and int(k[3:].split("M")[0]) >= 64 else ""
        )
        fo = f"{o:,.0f}" if o is not None else "-"
        ft = f"{t:,.0f}" if t is not None else "-"
        print(f"{k:<18}{fo:>16}{ft:>12}{ratio:>10}  {target}")


if __name__ == "__main__":
    main()
