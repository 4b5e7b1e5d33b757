"""Worker code for groups started late (after JAX work, beside RPC) and file:// rendezvous.

Each function runs in every rank (``tests._procs``). ``sys.argv[1:]`` says how the
job meets: ``"tcp"`` (``tcp://MASTER_ADDR:MASTER_PORT``) or a file path (``file://``).
"""

from __future__ import annotations

import os
import sys
import time

import jax.numpy as jnp
import numpy as np

import tensorplay_jax.distributed as dist
from tensorplay_jax.distributed import rpc
from tensorplay_jax.process_group import _group as pg
from tensorplay_jax.process_group import _kv
from tests._worker import error_text, hand_back, rank_and_world_size


def _init_method(where: str) -> str:
    if where == "tcp":
        return f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
    return f"file://{where}"


def _jax_work(rank: int) -> jnp.ndarray:
    """A JAX computation, run before anything distributed starts (as tensorplay's tests do)."""
    x = jnp.arange(6.0, dtype=jnp.float32).reshape(2, 3) * (rank + 1)
    return x.block_until_ready()


def group_after_jax_work() -> None:
    """JAX work, then a group on engine ``argv[2]``: all_reduce, barrier, a send/recv ring."""
    where, engine = sys.argv[1], sys.argv[2]
    rank, n = rank_and_world_size()
    x = _jax_work(rank)
    dist.init_process_group(
        "gloo", init_method=_init_method(where), rank=rank, world_size=n, timeout=60, engine=engine
    )
    got = {"engine": pg.world().world.engine.name, "all_reduce": np.asarray(dist.all_reduce(x))}
    dist.barrier()
    got["barrier"] = True
    buf = jnp.zeros(4, jnp.float32)
    works = [dist.isend(jnp.full(4, 10.0 * rank), (rank + 1) % n), dist.irecv(buf, (rank - 1) % n)]
    for w in works:
        w.wait()
    got["recv"] = np.asarray(works[1].result())
    dist.destroy_process_group()
    got["file_after_destroy"] = os.path.exists(where)
    hand_back(got)


def runtime_refused_after_jax_work() -> None:
    """JAX work, then what needs JAX's runtime (engine xla, nccl): the errors; then auto works."""
    rank, n = rank_and_world_size()
    x = _jax_work(rank)
    got = {}
    for key, kwargs in (
        ("xla", {"backend": "gloo", "engine": "xla"}),
        ("nccl", {"backend": "nccl"}),
    ):
        got[key] = error_text(dist.init_process_group, **kwargs, rank=rank, world_size=n)
        got[f"{key}/initialized"] = dist.is_initialized()
    dist.init_process_group("gloo", rank=rank, world_size=n, timeout=30)
    got["auto"] = np.asarray(dist.all_reduce(x))
    dist.destroy_process_group()
    hand_back(got)


def rpc_and_group() -> None:
    """RPC and a group over the same init method, started in the order ``argv[2]`` names."""
    where, order = sys.argv[1], sys.argv[2]
    rank, n = rank_and_world_size()
    im = _init_method(where)
    opts = rpc.GrpcRpcBackendOptions(init_method=im, init_timeout=60)

    def start_group() -> None:
        dist.init_process_group("gloo", init_method=im, rank=rank, world_size=n, timeout=60)

    def start_rpc() -> None:
        rpc.init_rpc(f"w{rank}", rank=rank, world_size=n, rpc_backend_options=opts)

    x = None
    if order == "rpc_then_pg":
        start_rpc()
        x = _jax_work(rank)  # tensors made while RPC is up, before the group starts
        start_group()
    else:
        start_group()
        start_rpc()
        x = _jax_work(rank)
    got = {
        "rpc": rpc.rpc_sync(f"w{(rank + 1) % n}", divmod, args=(7 + rank, 2)),
        "all_reduce": np.asarray(dist.all_reduce(x)),
    }
    dist.barrier()
    rpc.shutdown()
    dist.destroy_process_group()
    hand_back(got)


def rpc_over_file() -> None:
    """``init_rpc`` meeting in the file ``argv[1]``: one call each way, then shutdown."""
    rank, n = rank_and_world_size()
    opts = rpc.GrpcRpcBackendOptions(init_method=f"file://{sys.argv[1]}", init_timeout=60)
    rpc.init_rpc(f"w{rank}", rank=rank, world_size=n, rpc_backend_options=opts)
    got = {"rpc": rpc.rpc_sync(f"w{(rank + 1) % n}", divmod, args=(7 + rank, 2))}
    rpc.shutdown()
    hand_back(got)


def _slow_add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Served on the callee: its first JAX work, a second after the call arrived."""
    time.sleep(1.0)
    return np.asarray(jnp.asarray(a) + jnp.asarray(b))


def group_beside_a_served_first_jax_call() -> None:
    """tensorplay's ``test_deadlock``: RPC up; rank 1 waits for a call whose JAX work
    starts on rank 2 while rank 2 starts the group; then every rank starts the group."""
    rank, n = rank_and_world_size()
    opts = rpc.GrpcRpcBackendOptions(init_timeout=60)
    rpc.init_rpc(f"w{rank}", rank=rank, world_size=n, rpc_backend_options=opts)
    got = {}
    if rank == 1:
        ones = np.ones(2, np.float32)
        got["slow_add"] = rpc.rpc_async("w2", _slow_add, args=(ones, ones), timeout=15).wait()
    dist.init_process_group("gloo", rank=rank, world_size=n, timeout=60)
    got["runtime"] = _kv.is_runtime_initialized()
    got["all_reduce"] = np.asarray(dist.all_reduce(jnp.full(3, float(rank + 1))))
    rpc.shutdown()
    dist.destroy_process_group()
    hand_back(got)


def group_of_ranks_that_differ_in_jax_work() -> None:
    """Rank 0 ran JAX work, the others did not: every rank starts the group the same way."""
    rank, n = rank_and_world_size()
    if rank == 0:
        _jax_work(rank)
    dist.init_process_group("gloo", rank=rank, world_size=n, timeout=60)
    got = {"runtime": _kv.is_runtime_initialized(), "engine": pg.world().world.engine.name}
    got["all_reduce"] = np.asarray(dist.all_reduce(jnp.full(3, float(rank + 1))))
    dist.destroy_process_group()
    hand_back(got)


def group_before_jax_work() -> None:
    """No JAX work and no RPC anywhere: the group starts JAX's runtime on every rank."""
    rank, n = rank_and_world_size()
    dist.init_process_group("gloo", rank=rank, world_size=n, timeout=60, engine="xla")
    got = {"runtime": _kv.is_runtime_initialized(), "engine": pg.world().world.engine.name}
    got["all_reduce"] = np.asarray(dist.all_reduce(jnp.full(3, float(rank + 1))))
    dist.destroy_process_group()
    hand_back(got)
