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
    python benchmarks/rpc.py --sharded  # sharded echo vs unsharded vs gather-and-send

``--sharded`` measures ours only: an echo of a 64 MiB float32 array sharded 4
ways (``NamedSharding`` over ``cpu:1..4`` of 8 virtual CPU devices, mapped to
the peer's ``cpu:4..7`` by the device maps: it travels shard by shard and
comes back sharded), beside the same bytes as one array on one device, and
beside gathering it to the host (``np.asarray``), sending that, and sharding
the reply again (``jax.device_put``), in the same two workers, in
alternating rounds. Each round sends a freshly computed array (as a training
step does; made before the clock starts), so the gather is timed each round:
JAX keeps an array's host copy once made, and a gather of the same array
again would cost nothing. It prints the best and the median round of each,
and the ratios of the best.

``--profile`` measures ours only, with recording off and on in the same two
workers, in alternating rounds (off/on, then on/off, ...): each "on" round runs
inside ``profiler.trace()``, so both workers record every send, serve and reply;
starting the trace, its clock pings and merging the events at its end are
outside the timed loops. It prints the best round of each, and the cost.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._launch import free_port, worker_env  # noqa: E402


def echo(x):
    return x


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


def _block(rpc, x, n_lat: int, n_pipe: int) -> tuple[float, float]:
    """One timed block: rpc_sync latency (us) over n_lat calls, then pipelined calls/s."""
    t = time.perf_counter()
    for _ in range(n_lat):
        rpc.rpc_sync("w1", echo, (x,))
    lat = (time.perf_counter() - t) / n_lat * 1e6
    t = time.perf_counter()
    rpc.wait_all([rpc.rpc_async("w1", echo, (x,)) for _ in range(n_pipe)])
    return lat, n_pipe / (time.perf_counter() - t)


def _span_cost_us(trace, n: int = 20_000) -> float:
    """What recording one RPC span costs this process (us), alone: begin, then close."""
    trace.start()
    t = time.perf_counter()
    for i in range(n):
        trace.begin("send call echo", "rpc").close(i, 1, ("to", "w1", "bytes", 100))
    cost = (time.perf_counter() - t) / n * 1e6
    trace.stop()
    trace.clear()
    return cost


def _overhead(rpc, profiler, make, pairs: int, n_lat: int, n_pipe: int) -> dict:
    """Recording off vs on in the same workers: ``pairs`` adjacent off/on blocks, order alternating.

    This machine's noise between two identical blocks is +-25%, so each on block is
    compared with the off block beside it and the median of those ratios is the cost;
    the best block of each mode is reported too.
    """
    from tensorplay_jax.runtime import trace

    x = make(4)
    for _ in range(200):
        rpc.rpc_sync("w1", echo, (x,))
    got: dict = {"off": [], "on": []}
    spans = 0
    for r in range(pairs):
        for mode in ("off", "on") if r % 2 == 0 else ("on", "off"):
            if mode == "off":
                got["off"].append(_block(rpc, x, n_lat, n_pipe))
                continue
            with profiler.trace() as t:
                got["on"].append(_block(rpc, x, n_lat, n_pipe))
            spans = sum(e["ph"] == "X" and e["cat"] == "rpc" for e in t.document["traceEvents"])
    lat_ratio = sorted(on[0] / off[0] for off, on in zip(got["off"], got["on"], strict=True))
    cps_ratio = sorted(off[1] / on[1] for off, on in zip(got["off"], got["on"], strict=True))
    return {
        "off": {
            "latency_us": min(b[0] for b in got["off"]),
            "calls_per_s": max(b[1] for b in got["off"]),
        },
        "on": {
            "latency_us": min(b[0] for b in got["on"]),
            "calls_per_s": max(b[1] for b in got["on"]),
        },
        "median_cost": {
            "latency_us": lat_ratio[pairs // 2] - 1,
            "calls_per_s": cps_ratio[pairs // 2] - 1,
        },
        "spans_per_call": spans / (n_lat + n_pipe),
        "span_us": _span_cost_us(trace),
    }


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
                res = _overhead(rpc, profiler, make, 6 * repeats, n_lat // 2, n_pipe // 2)
            else:
                res = _measure(
                    rpc.rpc_sync, rpc.rpc_async, rpc.wait_all, make, sizes, repeats, n_lat, n_pipe
                )
            Path(out).write_text(json.dumps(res))
        rpc.shutdown()


SHARD_MAP = {f"cpu:{k}": f"cpu:{k + 3}" for k in range(1, 5)}  # w0's cpu:1..4 -> w1's 4..7


def sharded_worker(rank: int, port: int, mib: int, repeats: int, out: str) -> None:
    """One worker of ``--sharded``; rank 0 measures and writes the results to ``out``."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from tensorplay_jax.distributed import rpc

    maps = SHARD_MAP if rank == 0 else {v: k for k, v in SHARD_MAP.items()}
    opts = rpc.TensorPipeRpcBackendOptions(device_maps={f"w{1 - rank}": maps})
    rpc.init_rpc(f"w{rank}", rank=rank, world_size=2, rpc_backend_options=opts)
    if rank == 0:
        cpus = jax.devices("cpu")
        sharding = NamedSharding(Mesh(np.array(cpus[1:5]), ("x",)), PartitionSpec("x"))
        n = mib * (1 << 20) // 4
        inputs = {
            "sharded": jax.device_put(np.ones(n, np.float32), sharding),
            "unsharded": jax.device_put(np.ones(n, np.float32), cpus[1]),
        }
        inputs["gather_and_send"] = inputs["sharded"]
        step = jax.jit(lambda a: a + 1)  # a fresh array each round, where its input is

        def gather_and_send(x) -> None:
            back = rpc.rpc_sync("w1", echo, (np.asarray(x),))
            jax.device_put(back, sharding).block_until_ready()

        cases = {
            "sharded": lambda x: rpc.rpc_sync("w1", echo, (x,)).block_until_ready(),
            "unsharded": lambda x: rpc.rpc_sync("w1", echo, (x,)).block_until_ready(),
            "gather_and_send": gather_and_send,
        }
        times: dict[str, list[float]] = {k: [] for k in cases}
        for name, case in cases.items():  # warm up: compile, map segments
            case(step(inputs[name]).block_until_ready())
        for r in range(repeats):
            order = list(cases) if r % 2 == 0 else list(reversed(cases))
            for name in order:
                x = step(inputs[name]).block_until_ready()
                t0 = time.perf_counter()
                cases[name](x)
                times[name].append(time.perf_counter() - t0)
                del x
        mb = 2 * mib * (1 << 20) / 1e6  # payload both ways
        res = {k: mb / min(v) for k, v in times.items()}
        res.update({f"{k}_median": mb / sorted(v)[len(v) // 2] for k, v in times.items()})
        Path(out).write_text(json.dumps(res))
    rpc.shutdown()


def run_sharded(mib: int, repeats: int, transport: str = "auto") -> dict:
    """``--sharded``: two workers with 8 virtual CPU devices each; the MB/s of each case."""
    port = free_port()
    out = f"/tmp/tpj-bench-sharded-{os.getpid()}.json"
    env = worker_env()
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    ).strip()
    if transport in ("tcp", "grpc"):
        env["TENSORPLAY_JAX_RPC_LOCAL"] = "0"
        env["TENSORPLAY_JAX_RPC_TCP"] = "1" if transport == "tcp" else "0"
    boot = (
        "import sys; from benchmarks.rpc import sharded_worker; "
        "sharded_worker(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), "
        "int(sys.argv[4]), sys.argv[5])"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", boot, str(r), str(port), str(mib), str(repeats), out],
            env=env,
            cwd=ROOT,
        )
        for r in (0, 1)
    ]
    for p in procs:
        if p.wait(timeout=900) != 0:
            raise SystemExit("sharded benchmark worker failed")
    res = json.loads(Path(out).read_text())
    os.unlink(out)
    return res


def run(
    impl: str, sizes: list[int], repeats: int, transport: str = "auto", profile: bool = False
) -> dict:
    port = free_port()
    out = f"/tmp/tpj-bench-{impl}-{os.getpid()}.json"
    env = worker_env()
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
    ap.add_argument(
        "--sharded",
        action="store_true",
        help="ours: a sharded echo vs the same bytes unsharded vs gather-to-host-and-send",
    )
    ap.add_argument("--sharded-mib", type=int, default=64)
    a = ap.parse_args()
    if a.sharded:
        res = run_sharded(a.sharded_mib, a.repeats, a.transport)
        print(f"echo of {a.sharded_mib} MiB float32, {a.repeats} rounds (MB/s, both ways)")
        print(f"{'':<18}{'best':>12}{'median':>12}")
        for k in ("sharded", "unsharded", "gather_and_send"):
            print(f"{k:<18}{res[k]:>12,.0f}{res[k + '_median']:>12,.0f}")
        print(
            f"sharded / unsharded {res['sharded'] / res['unsharded']:.2f}x (target >= 1.00x), "
            f"sharded / gather_and_send {res['sharded'] / res['gather_and_send']:.2f}x "
            "(target > 1.00x)"
        )
        return
    if a.profile:
        res = run("ours", a.sizes, a.repeats, a.transport, True)
        print(
            f"{'metric':<14}{'best off':>10}{'best on':>10}{'cost (median of pairs)':>24}  target"
        )
        for k in ("latency_us", "calls_per_s"):
            off, on, cost = res["off"][k], res["on"][k], res["median_cost"][k]
            print(f"{k:<14}{off:>10,.0f}{on:>10,.0f}{cost:>+24.1%}  <= +10%")
        per_call = res["spans_per_call"] * res["span_us"]
        print(
            f"recorder alone: {res['spans_per_call']:.2f} spans per call (both workers) x "
            f"{res['span_us']:.2f} us = {per_call:.1f} us per call "
            f"({per_call / res['off']['latency_us']:.1%} of the best off latency)"
        )
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
