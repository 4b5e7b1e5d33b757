"""Cross-host RPC benchmark: ours beside torch.distributed.rpc, one worker on each of two hosts.

The hosts are network namespaces on a bridge (``tensorplay_jax.testing.netns``;
needs root and ``ip``, else the script says why and exits). torch runs on the
TensorPipe channels real separate hosts use (``_channels=["mpt_uv", "basic"]``,
``_transports=["uv"]``): between namespaces of one kernel its default would
pick CMA, a process-to-process memory copy no two machines can do.

Each round starts fresh workers for ours, then for torch, then the floors (a
plain TCP socket: 8-byte round trip and 64 MiB echo); ``--rounds`` rounds
interleave them, and the table shows each figure's median over the rounds.
The RPC rows reuse ``benchmarks/rpc.py``'s measurement (``_measure``: best of
``--repeats`` within a round) and the dist-autograd row ``benchmarks/dist_autograd.py``'s
one-hop iteration.

Usage::

    python benchmarks/crosshost.py                     # 5 rounds, full table
    python benchmarks/crosshost.py --rounds 1 --only ours
    TPJ_BENCH_TORCH_PYTHON=/path/to/python python benchmarks/crosshost.py
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import _crosshost
from tensorplay_jax.testing.netns import Cluster

SIZES = [1, 16, 64]
N_LAT, N_PIPE, N_AG = 500, 2000, 200


def rpc_worker(
    impl: str, rank: int, master: str, port: int, addr: str | None, repeats: int, out: str
) -> None:
    """One RPC worker of ``impl`` ("ours" or "torch"); rank 0 measures and writes ``out``."""
    from benchmarks import dist_autograd as dag
    from benchmarks.rpc import _measure

    os.environ.update(MASTER_ADDR=master, MASTER_PORT=str(port))
    impl_ = dag._Impl(impl)
    rpc, ag = impl_.rpc, impl_.ag
    if impl == "torch":
        import torch

        opts = rpc.TensorPipeRpcBackendOptions(
            init_method=f"tcp://{master}:{port}", _channels=["mpt_uv", "basic"], _transports=["uv"]
        )
        make, wait_all = (lambda n: torch.ones(n, dtype=torch.float32)), torch.futures.wait_all
    else:
        import numpy as np

        opts = (
            rpc.GrpcRpcBackendOptions()
            if addr is None
            else rpc.GrpcRpcBackendOptions(listen_addr=addr)
        )
        make, wait_all = (lambda n: np.ones(n, dtype=np.float32)), rpc.wait_all
    rpc.init_rpc(f"w{rank}", rank=rank, world_size=2, rpc_backend_options=opts)
    if rank == 0:
        res = _measure(rpc.rpc_sync, rpc.rpc_async, wait_all, make, SIZES, repeats, N_LAT, N_PIPE)
        t = impl_.leaf()

        def one_hop() -> None:
            with ag.context() as cid:
                ag.backward(cid, [rpc.rpc_sync("w1", dag.double, args=(t,)).sum()])
                ag.get_gradients(cid)

        res["one_hop_ms"] = dag._time(one_hop, N_AG, repeats)
        Path(out).write_text(json.dumps(res))
    rpc.shutdown()


def tcp_floor(rank: int, addr: str, port: int, repeats: int, out: str) -> None:
    """A plain TCP socket between the hosts: 8-byte round trip and 64 MiB echo (rank 0 times)."""
    n = 64 << 20
    buf = bytearray(n)
    view = memoryview(buf)

    def recv_exact(s: socket.socket, k: int) -> None:
        got = 0
        while got < k:
            r = s.recv_into(view[got:k])
            if not r:
                raise ConnectionError("closed")
            got += r

    if rank == 1:
        with socket.create_server((addr, port)) as srv:
            srv.settimeout(120)
            conn, _ = srv.accept()
        with conn:
            conn.settimeout(120)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for _ in range(N_LAT * repeats):
                recv_exact(conn, 8)
                conn.sendall(view[:8])
            for _ in range(repeats):
                recv_exact(conn, n)
                conn.sendall(view)
        return
    deadline = time.monotonic() + 60
    while True:
        try:
            s = socket.create_connection((addr, port), timeout=120)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    with s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(N_LAT):
                s.sendall(view[:8])
                recv_exact(s, 8)
            best = min(best, (time.perf_counter() - t0) / N_LAT)
        res = {"latency_us": best * 1e6}
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            s.sendall(view)
            recv_exact(s, n)
            best = min(best, time.perf_counter() - t0)
        res["bw_64MiB_MBps"] = n / best / 1e6
    Path(out).write_text(json.dumps(res))


def _round(c: Cluster, impl: str, repeats: int, listen: str) -> dict[str, float]:
    master, port = c.addresses[0], 29000 + secrets.randbelow(20000)
    out = _crosshost.result_path(impl)
    env = {
        "TENSORPLAY_JAX_RPC_SECRET": secrets.token_hex(16),
        # torch's TensorPipe and gloo: the interface between the hosts (the host name
        # resolves to 127.0.1.1 there, as on a stock Debian machine).
        "TP_SOCKET_IFNAME": "eth0",
        "GLOO_SOCKET_IFNAME": "eth0",
    }
    python = _crosshost.TORCH_PYTHON if impl == "torch" else _crosshost.OURS_PYTHON
    targets = []
    for rank in (0, 1):
        addr = c.addresses[rank] if (impl == "ours" and listen == "explicit") else None
        args = [impl, rank, master, port, addr, repeats, out]
        targets.append(("benchmarks.crosshost:rpc_worker", args))
    if impl == "floor":
        targets = [("benchmarks.crosshost:tcp_floor", [r, c.addresses[1], port, repeats, out])
                   for r in (0, 1)]  # fmt: skip
    _crosshost.run(c, targets, env, python, timeout=900)
    return _crosshost.read_result(out)


ROWS = [
    ("rpc_sync round trip", "latency_us", "µs", "<= 0.5x"),
    ("pipelined rpc_async", "calls_per_s", "/s", ">= 2x"),
    ("echo 1 MiB", "bw_1MiB_MBps", "MB/s", ">= 1.0x"),
    ("echo 16 MiB", "bw_16MiB_MBps", "MB/s", ">= 1.0x"),
    ("echo 64 MiB", "bw_64MiB_MBps", "MB/s", ">= 1.0x, >= 0.8x of TCP"),
    ("dist-autograd one hop", "one_hop_ms", "ms", "<= 0.6x"),
]


def _fmt(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    return f"{v:,.2f} {unit}" if unit == "ms" else f"{v:,.0f} {unit}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", choices=["ours", "torch"], default=None)
    ap.add_argument(
        "--listen",
        choices=["explicit", "default"],
        default="default",
        help="ours: pass listen_addr=<host address> (explicit) or rely on the defaults",
    )
    a = ap.parse_args()
    why = _crosshost.unavailable()
    if why:
        print(f"crosshost: skipped: {why}")
        return
    impls = [i for i in ("ours", "torch") if a.only in (None, i)] + ["floor"]
    got: dict[str, list[dict[str, float]]] = {i: [] for i in impls}
    with Cluster(2) as c:
        for r in range(a.rounds):
            for impl in impls:
                res = _round(c, impl, a.repeats, a.listen)
                got[impl].append(res)
                print(f"round {r + 1}/{a.rounds} {impl}: {json.dumps(res)}", flush=True)
    med = {
        i: {k: statistics.median(d[k] for d in runs) for k in runs[0]} for i, runs in got.items()
    }
    ours, torch, floor = med.get("ours", {}), med.get("torch", {}), med["floor"]
    print(f"\nmedians of {a.rounds} rounds, {time.strftime('%Y-%m-%d')}, 2 namespace hosts\n")
    print("| metric | ours | torch | ratio | target |")
    print("|---|---|---|---|---|")
    for name, key, unit, target in ROWS:
        o, t = ours.get(key), torch.get(key)
        ratio = f"{o / t:.2f}x" if o and t else "-"
        if key == "bw_64MiB_MBps" and o:
            ratio += f" ({o / floor[key]:.2f}x of TCP)"
        print(f"| {name} | {_fmt(o, unit)} | {_fmt(t, unit)} | {ratio} | {target} |")
    print(
        f"\nfloors on this link (plain TCP socket): round trip {floor['latency_us']:,.0f} µs, "
        f"64 MiB echo {floor['bw_64MiB_MBps']:,.0f} MB/s"
    )


if __name__ == "__main__":
    main()
