"""``python -m tensorplay_jax.run --nproc N script.py``: start N local workers (tensorplay-jax-run).

Sets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR,
MASTER_PORT and TORCHELASTIC_RUN_ID (as torchrun) for each worker, prefixes
every output line with ``[rank N]``, and if one worker fails stops the others
and exits with its code. torchrun's spellings are accepted
(``--nproc-per-node``, ``--nnodes``, ``--node-rank``, ``--master-addr``,
``--master-port``, ``--local-addr``, also with underscores); under SLURM the
node count, node rank and master address default to SLURM's values.
``--listen-addr`` / ``--ifname`` choose the address this node's workers
bind and advertise to other nodes (default: the interface that routes to the
master address; see ``tensorplay_jax.runtime.address``).

A one-node job gets a fresh random job secret (``TENSORPLAY_JAX_RPC_SECRET``)
unless the environment already has one. A multi-node job needs the same secret
on every node (``TENSORPLAY_JAX_RPC_SECRET`` or ``TENSORPLAY_JAX_RPC_SECRET_FILE``),
or ``--insecure`` to run unauthenticated. The workers share one JAX compilation
cache made by the launcher and removed when it exits, unless the user chose one
(``JAX_COMPILATION_CACHE_DIR``) or turned it off (see ``runtime.compile_cache``).

Example::

    python -m tensorplay_jax.run --nproc 2 examples/rnn_remote.py
    python -m tensorplay_jax.run --nnodes 2 --node-rank 0 --nproc-per-node 4 \\
        --master-addr node0 --master-port 29500 train.py --lr 0.1
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence

from tensorplay_jax.runtime import settings
from tensorplay_jax.runtime.compile_cache import job_cache_env
from tensorplay_jax.runtime.init_method import slurm_env
from tensorplay_jax.runtime.launch import WorkerProcesses, free_port, launch_secret_env, worker_env
from tensorplay_jax.runtime.settings import LISTEN_ADDR_ENV, SOCKET_IFNAME_ENV

__all__ = ["main", "parse_args"]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse launcher arguments (everything after the script goes to the script)."""
    p = argparse.ArgumentParser(
        prog="tensorplay-jax-run",
        description="Start N local tensorplay_jax workers with the rendezvous environment set.",
    )
    p.add_argument(
        "--nproc",
        "--nproc-per-node",
        "--nproc_per_node",
        dest="nproc",
        type=int,
        default=None,
        help="workers on this node (default: 1, or SLURM_NTASKS_PER_NODE)",
    )
    p.add_argument(
        "--nnodes", type=int, default=None, help="number of nodes (default 1 or SLURM_NNODES)"
    )
    p.add_argument(
        "--node-rank",
        "--node_rank",
        dest="node_rank",
        type=int,
        default=None,
        help="this node's index (default 0 or SLURM_NODEID)",
    )
    p.add_argument(
        "--master-addr",
        "--master_addr",
        dest="master_addr",
        default=None,
        help="rendezvous host (default 127.0.0.1, MASTER_ADDR or the first SLURM node)",
    )
    p.add_argument(
        "--master-port",
        "--master_port",
        dest="master_port",
        type=int,
        default=None,
        help="rendezvous port (default: MASTER_PORT or a free port on a single node)",
    )
    p.add_argument(
        "--listen-addr",
        "--local-addr",
        "--local_addr",
        dest="listen_addr",
        default=None,
        help="the address this node's workers bind and advertise to the other nodes "
        "(sets TENSORPLAY_JAX_LISTEN_ADDR; default: the one routing to the master address)",
    )
    p.add_argument(
        "--ifname",
        default=None,
        help="the interface whose address this node's workers bind and advertise "
        "(sets TENSORPLAY_JAX_SOCKET_IFNAME)",
    )
    p.add_argument(
        "--devices-per-worker",
        "--devices_per_worker",
        dest="devices_per_worker",
        default=None,
        help="GPUs each local worker gets (CUDA_VISIBLE_DEVICES by LOCAL_RANK): auto (one "
        "each; the default), 0 (every worker sees every GPU) or a number",
    )
    p.add_argument(
        "--insecure",
        action="store_true",
        help="run a multi-node job with no job secret, unauthenticated (a warning is printed)",
    )
    p.add_argument(
        "--no-prefix", action="store_true", help="do not prefix output lines with the rank"
    )
    p.add_argument(
        "-m", "--module", action="store_true", help="run the target as a module (python -m)"
    )
    p.add_argument("script", help="the Python script (or module with -m) every worker runs")
    p.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments for the script")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code (0 when every worker succeeded)."""
    a = parse_args(argv)
    nnodes = a.nnodes or settings.get_int("SLURM_NNODES")
    node_rank = a.node_rank if a.node_rank is not None else settings.get_int("SLURM_NODEID")
    nproc = a.nproc or int(settings.get_str("SLURM_NTASKS_PER_NODE").split("(")[0])
    if nproc < 1 or nnodes < 1 or not 0 <= node_rank < nnodes:
        print(
            f"tensorplay-jax-run: bad sizes --nproc {nproc} --nnodes {nnodes} "
            f"--node-rank {node_rank}",
            file=sys.stderr,
        )
        return 2
    derived = slurm_env()
    master_addr = (
        a.master_addr or settings.raw("MASTER_ADDR") or derived.get("MASTER_ADDR") or "127.0.0.1"
    )
    port_env = settings.raw("MASTER_PORT") or derived.get("MASTER_PORT")
    if a.master_port is not None:
        master_port = a.master_port
    elif port_env:
        master_port = int(port_env)
    elif nnodes == 1:
        master_port = free_port(master_addr)
    else:
        print("tensorplay-jax-run: --master-port is required with --nnodes > 1", file=sys.stderr)
        return 2
    # torchrun's run id (its default rendezvous id): ``is_torchelastic_launched()`` holds.
    extra = {
        "NODE_RANK": str(node_rank),
        "TORCHELASTIC_RUN_ID": os.environ.get("TORCHELASTIC_RUN_ID", "none"),
    }
    if a.listen_addr:
        extra[LISTEN_ADDR_ENV] = a.listen_addr
    if a.ifname:
        extra[SOCKET_IFNAME_ENV] = a.ifname
    try:
        extra.update(launch_secret_env("tensorplay-jax-run", nnodes > 1, a.insecure))
        extra.update(job_cache_env("tensorplay-jax-run"))
    except ValueError as e:
        print(f"{e}", file=sys.stderr)
        return 2
    world = nnodes * nproc
    target = ["-m", a.script] if a.module else [a.script]
    cmds, envs, ranks = [], [], []
    for local in range(nproc):
        rank = node_rank * nproc + local
        ranks.append(rank)
        cmds.append([sys.executable, "-u", *target, *a.script_args])
        try:
            env = worker_env(
                rank, local, world, nproc, master_addr, master_port, extra, a.devices_per_worker
            )
        except ValueError as e:
            print(f"tensorplay-jax-run: {e}", file=sys.stderr)
            return 2
        envs.append(env)
    group = WorkerProcesses(cmds, envs, ranks, prefix=not a.no_prefix)

    def stop(signum: int, _frame: object) -> None:
        group.terminate()
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    def report(rank: int, code: int) -> None:
        print(
            f"tensorplay-jax-run: worker rank {rank} exited with code {code}; "
            "stopping the other workers",
            file=sys.stderr,
            flush=True,
        )

    return group.wait(on_failure=report)


if __name__ == "__main__":
    sys.exit(main())
