"""Process-group collectives: tensorplay_jax.distributed beside torch.distributed (gloo).

Times all_reduce, all_gather and broadcast of float32 messages (4 KiB, 1 MiB, 16 MiB,
64 MiB per rank) on 2 and 4 local processes. Each worker process runs both
libraries in the same run, alternating trial by trial within each (collective,
size): ours with the default engine ("shm" on one host), ours forced onto the XLA
engine (compiled, cached programs over gloo), and torch.distributed on gloo. Each
cell is the best of several trials of the mean time per call, a trial lasting as
long as its slowest rank (so a sender running ahead of its receivers is not timed
alone); the best trial filters out noise from other load on the machine.

What is timed, per call:
  ours: ``dist.<op>(x)`` from a jax.Array input to a jax.Array result, ready
    (``block_until_ready``): it allocates and returns a new array.
  torch: ``dist.all_reduce(t)`` / ``dist.broadcast(t, 0)`` in place and
    ``dist.all_gather_into_tensor(out, t)`` into a preallocated output.

"ratio" is torch time / our time: >= 1.0 means we move data at least as fast.

Usage:
  python benchmarks/process_group.py [--nprocs 2 4] [--sizes 4K 1M 16M 64M]
                                     [--ops all_reduce all_gather broadcast] [--no-xla]
  python benchmarks/process_group.py --crosshost [--rounds 3] [--trials 5]
                                     [--sizes 4K 1M 64M 256M] [--per-host 1 2] [--no-mpi]

--crosshost (root, Linux): all_reduce across two simulated hosts
(``tensorplay_jax.testing.netns.Cluster(2)``, network namespaces on a bridge), with
``--per-host`` workers per host (1 and 2). Each round starts one job per layout on
the cluster, run by ``--torch-python`` (a Python with torch and jax; torch may come
from ``PYTHONPATH``): in every rank, ours (default engine), ours on the XLA engine
and torch gloo (``GLOO_SOCKET_IFNAME=eth0``) alternate trial by trial; a job's time
is the median of its trials (a trial lasting as long as its slowest rank), and the
table shows the median over rounds.

Where that Python imports mpi4jax (an optional benchmark extra, never a dependency
of the package), one ``mpiexec`` on host 0 starts every rank (hydra's ssh launcher
pointed at the namespaces) and two more columns join the same trials: mpi4jax's
``allreduce`` (jitted, jax.Array in and out, as ours) and ``mpi4py``'s
``Allreduce`` of numpy into a preallocated buffer (MPI itself, the floor under
mpi4jax). MPI goes over the bridge (UCX's TCP transport; without ``UCX_TLS`` UCX
would copy memory between the namespaces, which no two hosts can do). Without
mpi4jax, or with ``--no-mpi``, the columns are skipped with the reason. To install
it into a venv (MPICH from its wheel; ``CUDA_PATH`` names an empty folder where a
CUDA toolkit without headers would make mpi4jax try its GPU extension)::

    .venv/bin/pip install mpich mpi4py
    mkdir -p /tmp/nocuda && PATH=$PWD/.venv/bin:$PATH MPI4JAX_BUILD_MPICC=$PWD/.venv/bin/mpicc \
        CUDA_PATH=/tmp/nocuda .venv/bin/pip install --no-deps mpi4jax
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SIZES = {"4K": 4 << 10, "1M": 1 << 20, "16M": 16 << 20, "64M": 64 << 20, "256M": 256 << 20}
ONE_HOST_SIZES = ["4K", "1M", "16M", "64M"]


def _iters(nbytes: int) -> tuple[int, int]:
    """(calls per trial, trials) for a message size."""
    if nbytes <= 64 << 10:
        return 50, 9
    if nbytes <= 2 << 20:
        return 10, 7
    if nbytes <= 32 << 20:
        return 3, 5
    return 2, 5


def _trials(libs: dict, nbytes: int) -> dict[str, list[float]]:
    """This rank's mean seconds per call in each trial, per library.

    ``libs`` maps a name to ``(fn, sync)``; every rank runs the same loop. The
    libraries' trials alternate, so a change in the machine's load (other jobs on a
    shared host) falls on all of them alike.
    """
    calls, trials = _iters(nbytes)
    for fn, _ in libs.values():
        fn()  # warm up: compile, grow buffers
        fn()
    out = {name: [] for name in libs}
    for _ in range(trials):
        for name, (fn, sync) in libs.items():
            sync()
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            out[name].append((time.perf_counter() - t0) / calls)
    return out


def _best(per_rank) -> float:
    """Best trial, where a trial takes as long as its slowest rank.

    A sender that may run ahead of its receivers (torch's broadcast root hands small
    messages to socket buffers) would otherwise time only how fast it can send.
    """
    return float(per_rank.max(axis=0).min())


def worker(argv: list[str]) -> None:
    """One rank: time every (op, size) for each library; rank 0 prints JSON lines."""
    args = json.loads(argv[0])
    import jax
    import numpy as np

    import tensorplay_jax.distributed as dist

    dist.init_process_group("gloo", timeout=600)
    world = dist.new_group()  # default engine ("shm" on one host)
    xla_world = None
    if args["xla"]:
        xla_world = dist.new_group(engine="xla")  # every rank, on the XLA engine

    import torch
    import torch.distributed as tdist

    tdist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()

    for op in args["ops"]:
        for label in args["sizes"]:
            nbytes = SIZES[label]
            count = nbytes // 4
            x = jax.device_put(np.full(count, rank + 1.0, np.float32))
            t = torch.full((count,), rank + 1.0)
            tout = torch.empty(n * count)

            def ours(g, x=x, op=op):
                if op == "all_reduce":
                    y = dist.all_reduce(x, group=g)
                elif op == "all_gather":
                    y = dist.all_gather(x, group=g)
                else:
                    y = dist.broadcast(x, src=0, group=g)
                y.block_until_ready()

            def theirs(t=t, tout=tout, op=op):
                if op == "all_reduce":
                    tdist.all_reduce(t)
                elif op == "all_gather":
                    tdist.all_gather_into_tensor(tout, t)
                else:
                    tdist.broadcast(t, 0)

            row = {"nprocs": n, "op": op, "size": label, "bytes": nbytes}
            libs = {"ours": (lambda: ours(world), dist.barrier), "torch": (theirs, tdist.barrier)}
            if xla_world is not None:
                libs["xla"] = (lambda: ours(xla_world), dist.barrier)
            times = _trials(libs, nbytes)
            for k, v in times.items():  # every rank's trials, to rank 0's table
                row[k] = _best(np.asarray(dist.all_gather(np.asarray(v), group=world)))
            # Correctness spot check of the timed results.
            y = np.asarray(
                dist.all_reduce(x, group=world)
                if op == "all_reduce"
                else dist.all_gather(x, group=world)
                if op == "all_gather"
                else dist.broadcast(x, src=0, group=world)
            )
            want = {"all_reduce": n * (n + 1) / 2, "broadcast": 1.0}.get(op)
            assert want is None or (float(y[0]) == want and float(y[-1]) == want)
            if rank == 0:
                print("ROW " + json.dumps(row), flush=True)
            del x, t, tout
    tdist.destroy_process_group()
    dist.destroy_process_group()


def crosshost_worker(spec: dict) -> None:
    """One rank of a cross-host job: each library's median seconds per all_reduce per size.

    Every library runs in this process (the torch venv has jax too), their trials
    alternating, so a change in the machine's load falls on all alike. Under
    ``mpiexec`` (``spec["mpi"]``) the rank comes from MPI and mpi4jax's allreduce
    is timed as well.
    """
    import os
    import statistics

    import jax
    import numpy as np
    import torch
    import torch.distributed as tdist

    import tensorplay_jax.distributed as dist

    if spec["mpi"]:
        import mpi4jax
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        mpi_sum = jax.jit(lambda v: mpi4jax.allreduce(v, op=MPI.SUM, comm=comm))
        rank = comm.Get_rank()
        os.environ.update(RANK=str(rank), WORLD_SIZE=str(comm.Get_size()))
        os.environ.update(LOCAL_RANK=str(rank % spec["per_host"]))
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", timeout=300)
    groups = {"ours": dist.new_group()}  # default engine
    if spec["xla"]:
        groups["xla"] = dist.new_group(engine="xla")
    tdist.init_process_group("gloo")
    out = {}
    for label in spec["sizes"]:
        count = SIZES[label] // 4
        x = jax.device_put(np.full(count, rank + 1.0, np.float32))
        t = torch.full((count,), rank + 1.0)
        libs = {
            name: (lambda g=g, x=x: dist.all_reduce(x, group=g).block_until_ready(), dist.barrier)
            for name, g in groups.items()
        }
        libs["torch"] = (lambda t=t: tdist.all_reduce(t), tdist.barrier)
        if spec["mpi"]:
            # jitted, as mpi4jax is used: an eager call re-lowers it every time.
            libs["mpi4jax"] = (lambda x=x: mpi_sum(x).block_until_ready(), comm.Barrier)
            # MPI itself, numpy to a preallocated result: the floor under mpi4jax.
            a, b = np.asarray(x), np.empty(count, np.float32)
            libs["mpi4py"] = (lambda a=a, b=b: comm.Allreduce(a, b), comm.Barrier)
        calls = 10 if count <= 1 << 18 else 2 if count <= 1 << 24 else 1
        times = {name: [] for name in libs}
        for fn, _ in libs.values():
            fn()
            fn()
        for _ in range(spec["trials"]):
            for name, (fn, sync) in libs.items():
                sync()
                t0 = time.perf_counter()
                for _ in range(calls):
                    fn()
                times[name].append((time.perf_counter() - t0) / calls)
        for name, v in times.items():  # a trial lasts as long as its slowest rank
            slowest = np.asarray(dist.all_reduce(np.asarray(v), op="max"))
            out.setdefault(name, {})[label] = statistics.median(slowest.tolist())
        n = dist.get_world_size()
        checks = {"ours": dist.all_reduce(x)}
        if spec["mpi"]:
            checks["mpi4jax"] = mpi_sum(x)
        for name, y in checks.items():
            y = np.asarray(y)
            assert float(y[0]) == n * (n + 1) / 2 == float(y[-1]), (name, y[:2])
        del x, t, libs, checks
    tdist.destroy_process_group()
    dist.destroy_process_group()
    if rank == 0:
        print("TIMES " + json.dumps(out), flush=True)


# Hydra's ssh launcher, pointed at a simulated host's namespace: mpiexec runs it as
# ``<this> [ssh options] <host address> <command>``, and it runs the command there.
_NETNS_SSH = """#!/bin/sh
while [ "${1#-}" != "$1" ]; do shift; done
host="$1"; shift
case "$host" in
%s
esac
exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec sh -c "$1"' "$ns" "$*"
"""


def mpi_unavailable(python: str) -> str | None:
    """Why the mpi4jax column cannot run with ``python`` (None when it can)."""
    import shutil
    import subprocess

    mpiexec = Path(python).parent / "mpiexec"
    if not mpiexec.exists() and shutil.which("mpiexec") is None:
        return f"no mpiexec beside {python} or on PATH"
    probe = subprocess.run(
        [python, "-c", "import mpi4jax, mpi4py"], capture_output=True, text=True, timeout=120
    )
    if probe.returncode:
        return f"{python} cannot import mpi4jax: {probe.stderr.strip().splitlines()[-1:]}"
    return None


def _crosshost_job(
    cluster, per_host: int, spec: dict, python: str, port: int, timeout: float, tmp: Path
):
    """Run one job of ``crosshost_worker`` on both hosts; rank 0's times.

    With ``spec["mpi"]`` one ``mpiexec`` (on host 0) starts every rank through
    :data:`_NETNS_SSH`; otherwise each rank is started here in its host.
    """
    import os
    import shutil
    import subprocess
    from subprocess import PIPE

    n = 2 * per_host
    procs = []
    env0 = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_", "JAX_", "MASTER"))}
    env0.update(MASTER_ADDR=cluster.addresses[0], MASTER_PORT=str(port), JAX_PLATFORMS="cpu")
    env0.update(LOCAL_WORLD_SIZE=str(per_host), WORLD_SIZE=str(n))
    env0.update(GLOO_SOCKET_IFNAME="eth0", TENSORPLAY_JAX_RPC_SECRET="crosshost-bench")
    env0["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    argv = [python, str(Path(__file__).resolve()), "--worker", json.dumps(spec)]
    if spec["mpi"]:
        # Two hosts share no memory: MPI between them goes over the bridge (UCX's
        # TCP transport; MPICH's own shared memory still joins ranks on one host).
        for k, v in {"UCX_TLS": "tcp,self", "UCX_NET_DEVICES": "eth0"}.items():
            env0.setdefault(k, v)
        launcher = tmp / "netns-ssh"
        pairs = zip(cluster.addresses, cluster.hosts, strict=True)
        cases = "\n".join(f"{addr}) ns={host} ;;" for addr, host in pairs)
        launcher.write_text(_NETNS_SSH % cases)
        launcher.chmod(0o755)
        mpiexec = Path(python).parent / "mpiexec"
        mpiexec = str(mpiexec) if mpiexec.exists() else shutil.which("mpiexec")
        hosts = ",".join(f"{a}:{per_host}" for a in cluster.addresses)
        cmd = [mpiexec, "-launcher", "ssh", "-launcher-exec", str(launcher), "-iface", "eth0"]
        cmd += ["-hosts", hosts, "-n", str(n), *argv]
        launches = [(cluster.command(0, cmd), env0)]
    else:
        launches = []
        for rank in range(n):
            env = dict(env0, RANK=str(rank), LOCAL_RANK=str(rank % per_host))
            launches.append((cluster.command(rank // per_host, argv), env))
    for cmd, env in launches:
        procs.append(subprocess.Popen(cmd, env=env, stdout=PIPE, stderr=PIPE, text=True))
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=timeout))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (so, se) in zip(procs, outs, strict=True):
        if p.returncode != 0:
            raise RuntimeError(f"{spec} failed ({p.returncode}):\n{so}\n{se[-3000:]}")
    line = next(ln for ln in outs[0][0].splitlines() if ln.startswith("TIMES "))
    return json.loads(line[6:])


def crosshost(a: argparse.Namespace) -> None:
    """The cross-host table: all_reduce on 2 simulated hosts, ours beside torch gloo (and MPI)."""
    import random
    import statistics
    import tempfile

    from tensorplay_jax.testing.netns import Cluster, unavailable

    why = unavailable()
    if why:
        raise SystemExit(f"--crosshost: {why}")
    no_mpi = "--no-mpi" if a.no_mpi else mpi_unavailable(a.torch_python)
    if no_mpi:
        print(f"mpi4jax column skipped: {no_mpi}", flush=True)
    spec = {"sizes": a.sizes, "xla": not a.no_xla, "trials": a.trials, "mpi": not no_mpi}
    got = {}  # (per_host, lib, size) -> [seconds per round]
    with Cluster(2) as c, tempfile.TemporaryDirectory() as tmp:
        for rnd in range(a.rounds):
            for per_host in a.per_host:
                port = random.randint(20000, 40000)
                job = dict(spec, per_host=per_host)
                t = _crosshost_job(c, per_host, job, a.torch_python, port, a.timeout, Path(tmp))
                for lib, sizes in t.items():
                    for size, sec in sizes.items():
                        got.setdefault((per_host, lib, size), []).append(sec)
                print(f"round {rnd} {per_host}/host: {json.dumps(t)}", flush=True)
    print()
    extra = [lib for lib in ("xla", "mpi4jax", "mpi4py") if any(k[1] == lib for k in got)]
    head = "workers/host  size   ours(ms)  torch(ms)  speed ours/torch"
    print(head + "".join(f"  {lib + '(ms)':>12} {lib + '/torch':>13}" for lib in extra))
    for per_host in a.per_host:
        for size in a.sizes:
            m = {
                lib: statistics.median(v)
                for (ph, lib, sz), v in got.items()
                if (ph, sz) == (per_host, size)
            }
            row = f"{per_host:>12}  {size:>4}  {m['ours'] * 1e3:9.2f} {m['torch'] * 1e3:9.2f}"
            row += f"  {m['torch'] / m['ours']:15.2f}x"
            for lib in extra:
                row += f"  {m[lib] * 1e3:12.2f} {m['torch'] / m[lib]:12.2f}x"
            print(row)
    print(
        f"medians over {a.rounds} jobs x {a.trials} interleaved trials; speed = torch time / "
        "their time (>= 1.0: as fast)."
    )


def _fmt_row(r: dict) -> str:
    def gbs(sec):
        return r["bytes"] / sec / 1e9

    s = (
        f"{r['nprocs']:>2}  {r['op']:<10} {r['size']:>4}  "
        f"{r['ours'] * 1e3:9.3f} {r['torch'] * 1e3:9.3f}  {r['torch'] / r['ours']:6.2f}x  "
        f"{gbs(r['ours']):7.2f} {gbs(r['torch']):7.2f}"
    )
    if "xla" in r:
        s += f"  {r['xla'] * 1e3:9.3f} {r['torch'] / r['xla']:6.2f}x"
    return s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nprocs", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--sizes", nargs="+", choices=list(SIZES), help="default: 4K 1M 16M 64M")
    ap.add_argument(
        "--ops",
        nargs="+",
        default=["all_reduce", "all_gather", "broadcast"],
        choices=["all_reduce", "all_gather", "broadcast"],
    )
    ap.add_argument("--no-xla", action="store_true", help="skip the XLA-engine column")
    ap.add_argument("--timeout", type=float, default=1200.0)
    ap.add_argument("--crosshost", action="store_true", help="2 simulated hosts (root)")
    ap.add_argument("--rounds", type=int, default=3, help="--crosshost: jobs per layout")
    ap.add_argument("--trials", type=int, default=5, help="--crosshost: trials per job")
    ap.add_argument(
        "--per-host", type=int, nargs="+", default=[1, 2], help="--crosshost: workers per host"
    )
    ap.add_argument("--no-mpi", action="store_true", help="--crosshost: skip the mpi4jax column")
    ap.add_argument(
        "--torch-python",
        default=sys.executable,
        help="--crosshost: a Python with torch and jax (torch may come from PYTHONPATH)",
    )
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        crosshost_worker(json.loads(a.worker))
        return
    if a.crosshost:
        a.sizes = a.sizes or ["4K", "1M", "64M", "256M"]
        crosshost(a)
        return
    a.sizes = a.sizes or ONE_HOST_SIZES

    from tests._procs import run_workers

    spec = json.dumps({"ops": a.ops, "sizes": a.sizes, "xla": not a.no_xla})
    script = (
        f"import sys; sys.path.insert(0, {str(ROOT)!r}); "
        f"sys.argv = ['bench', {spec!r}]; "
        "import runpy; m = runpy.run_path("
        f"{str(Path(__file__).resolve())!r}, run_name='bench_worker'); "
        "m['worker'](sys.argv[1:])"
    )
    head = " N  op         size   ours(ms)  torch(ms)  ratio   ours    torch(GB/s)" + (
        "  xla(ms)   xla ratio" if not a.no_xla else ""
    )
    rows = []
    for n in a.nprocs:
        res = run_workers(script, n, timeout=a.timeout)
        for line in res[0].stdout.splitlines():
            if line.startswith("ROW "):
                rows.append(json.loads(line[4:]))
                print(_fmt_row(rows[-1]), flush=True)
    print()
    print("ours = tensorplay_jax.distributed (default engine); torch = torch.distributed gloo;")
    print("xla = tensorplay_jax with engine='xla' (cached XLA programs over gloo);")
    print("ratio = torch time / our time (>= 1.0: at least torch's throughput).")
    print(head)
    for r in rows:
        print(_fmt_row(r))


if __name__ == "__main__":
    main()
