"""Worker code for the multi-host tests: each function runs in every rank, on its simulated host.

``tests._procs.run_on_hosts`` starts them; its ``TPJ_HOSTS`` (a JSON list) names the
host of every rank, so a worker knows which peers share its host. No worker
chooses an address: the defaults must work across hosts.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

import tensorplay_jax as tp
import tensorplay_jax.distributed as dist
import tensorplay_jax.distributed.autograd as dist_autograd
from tensorplay_jax.distributed import rpc
from tensorplay_jax.distributed.nn import RemoteModule
from tensorplay_jax.distributed.optim import DistributedOptimizer
from tests._worker import hand_back, init_rpc, npa, rank_and_world_size, report, wait_until


def _hosts() -> list[str]:
    return json.loads(os.environ["TPJ_HOSTS"])


# ---------------------------------------------------------------- targets (run on the callee)


def where() -> tuple[int, str]:
    """The callee's rank and host name."""
    return int(os.environ["RANK"]), socket.gethostname()


def identity(x: object) -> object:
    return x


def rref_sum(rref: rpc.RRef) -> float:
    """Fetch an RRef the caller owns (a second hop back across the link) and sum it."""
    return float(np.asarray(rref.to_here()).sum())


def squash(x: tp.Tensor, w: tp.Tensor) -> tp.Tensor:
    return (x * w).tanh()


def sleep(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


# ---------------------------------------------------------------- RPC


def _link_kind(peer: int) -> str:
    from tensorplay_jax.rpc import _agent

    link = _agent.current_agent().peers.links[peer]
    kinds = {"LocalLink": "socket", "TcpLink": "tcp"}
    return kinds.get(type(link).__name__, "grpc")


def big_payload(rank: int) -> np.ndarray:
    """The 4 MiB array rank ``rank`` echoes through each peer."""
    return np.random.default_rng(rank).standard_normal(1 << 20).astype(np.float32)


def rpc_calls() -> None:
    """Every rank calls every other one (sync, async, remote, RRefs both ways, 4 MiB);
    hands back what each call returned and the link each peer was reached by, per peer."""
    rank, ws = rank_and_world_size()
    init_rpc()
    x = np.arange(6.0, dtype=np.float32)
    got: dict[int, dict[str, object]] = {}
    for peer in range(ws):
        if peer == rank:
            continue
        to = f"w{peer}"
        rref = rpc.remote(to, np.arange, args=(peer + 3,))
        got[peer] = {
            "where": rpc.rpc_sync(to, where),
            "add": np.asarray(rpc.rpc_sync(to, jnp.add, args=(jnp.asarray(x), peer))),
            "async": [
                f.wait() for f in [rpc.rpc_async(to, np.multiply, args=(x, k)) for k in range(8)]
            ],
            "rref_owner": rref.owner().name,
            "rref_is_owner": rref.is_owner(),
            "rref_value": np.asarray(rref.to_here()),
            "rref_sum": rpc.rpc_sync(to, rref_sum, args=(rpc.RRef(x + rank),)),
            "echo": rpc.rpc_sync(to, identity, args=(big_payload(rank),)),
            "link": _link_kind(peer),
        }
    rpc.shutdown()
    hand_back(got)


SEED = 0  # the inputs of autograd_and_optimizer: rng(SEED) draws x, w (2, 5, 3), then
BATCHES = (3, 5, 4)  # the optimizer's batches; the test draws them again for its oracle


def autograd_and_optimizer() -> None:
    """Rank 0 drives the last rank (on another host): one dist-autograd hop, then a
    RemoteModule trained by a DistributedOptimizer (Adam, lr 0.05); it reports the
    gradients and the parameters before and after, for the test's local JAX oracle."""
    rank, ws = rank_and_world_size()
    hosts = _hosts()
    init_rpc()
    if rank == 0:
        peer = f"w{ws - 1}"
        rng = np.random.default_rng(SEED)
        x0, w0 = rng.standard_normal((2, 5, 3)).astype(np.float32)
        x, w = tp.tensor(x0, requires_grad=True), tp.tensor(w0, requires_grad=True)
        with dist_autograd.context() as ctx:
            out = rpc.rpc_sync(peer, squash, args=(x, w))
            dist_autograd.backward(ctx, [(out * out).sum()])
            grads = dist_autograd.get_gradients(ctx)

        rm = RemoteModule(f"{peer}/cpu", tp.nn.Linear, args=(4, 3))
        rrefs = rm.remote_parameters()
        start = [npa(r.to_here()) for r in rrefs]
        opt = DistributedOptimizer(optax.adam(0.05), rrefs)
        for xb in rng.standard_normal(BATCHES).astype(np.float32):
            with dist_autograd.context() as ctx:
                y = rm(tp.tensor(xb))
                dist_autograd.backward(ctx, [(y * y).sum()])
                opt.step(ctx)
        report(
            hosts=[hosts[0], hosts[ws - 1]],
            grads=[npa(grads[x]).tolist(), npa(grads[w]).tolist()],
            start=[p.tolist() for p in start],
            trained=[npa(r.to_here()).tolist() for r in rrefs],
        )
    rpc.shutdown()


def tls() -> None:
    """gRPC with mutual TLS between hosts; the certificate names the hosts' addresses."""
    rank, ws = rank_and_world_size()
    d = os.environ["TPJ_CERTS"]
    opts = rpc.GrpcRpcBackendOptions(
        tls_cert_chain=f"{d}/cert.pem",
        tls_private_key=f"{d}/key.pem",
        tls_root_certs=f"{d}/cert.pem",
        tls_require_client_auth=True,
    )
    init_rpc(rpc_backend_options=opts)
    peer = (rank + 1) % ws
    x = np.arange(3 << 18, dtype=np.float32)  # large enough to be chunked
    got = {
        "echo": rpc.rpc_sync(f"w{peer}", identity, args=(x,)),
        "remote_where": rpc.remote(f"w{peer}", where).to_here(),
        "link": _link_kind(peer),
    }
    rpc.shutdown()
    hand_back(got)


# ---------------------------------------------------------------- faults


def _await(path: Path, timeout: float) -> None:
    wait_until(path.exists, timeout=timeout)


def _failure(call, *args, **kwargs) -> dict | None:
    """How ``call`` failed: seconds it took, the error's type and message (None: it returned)."""
    t0 = time.monotonic()
    try:
        call(*args, **kwargs)
    except Exception as e:
        return {"s": time.monotonic() - t0, "type": type(e).__name__, "message": str(e)}
    return None


def faults() -> None:
    """Rank 0 on host 0; the test kills host 1 (rank 1) and cuts host 2 (rank 2) off.

    Rank 0 reports where its peers run and how each call to them failed.
    """
    rank = rank_and_world_size()[0]
    tmp = Path(os.environ["TPJ_TMP"])
    init_rpc()
    if rank == 0:
        ranks = [rpc.rpc_sync("w1", where)[0], rpc.rpc_sync("w2", where)[0]]
        pending = rpc.rpc_async("w1", sleep, args=(120,))
        (tmp / "kill-now").write_text("")
        killed = _failure(pending.wait)
        (tmp / "cut-now").write_text("")
        _await(tmp / "cut", 30)
        cut = _failure(rpc.rpc_sync, "w2", where, timeout=4)
        report(ranks=ranks, killed=killed, cut=cut)
        (tmp / "checked").write_text("")
    else:
        _await(tmp / "checked", 100)
    os._exit(0)  # the peers are dead or unreachable: no graceful shutdown to wait for


# ---------------------------------------------------------------- process groups and SPMD


def pg_input(k: int) -> np.ndarray:
    """Rank ``k``'s input to the multi-host collectives."""
    return np.arange(12, dtype=np.float32).reshape(3, 4) * (k + 1) + k


def process_groups() -> None:
    """Blocking collectives across hosts (and within a host), then a shard_map psum over
    the devices of every process; hands back what each returned and each group's engine."""
    dist.init_process_group("gloo", timeout=60)
    r, n = dist.get_rank(), dist.get_world_size()
    hosts = _hosts()
    mine = jnp.asarray(pg_input(r))
    got: dict[str, object] = {
        "all_reduce": np.asarray(dist.all_reduce(mine)),
        "all_reduce_max": np.asarray(dist.all_reduce(mine, op="max")),
        "broadcast": [np.asarray(dist.broadcast(mine, src=root)) for root in range(n)],
        "all_gather": np.asarray(dist.all_gather(mine)),
    }
    dist.barrier()
    # A group of the ranks on each host (every process makes every group, in order).
    for host in sorted(set(hosts)):
        g = dist.new_group([k for k in range(n) if hosts[k] == host])
        if hosts[r] == host:
            got["host_all_reduce"] = np.asarray(dist.all_reduce(mine, group=g))
            got["engine/host"] = _engine(g)
    got["engine/world"] = _engine(None)
    # XLA's own collectives (gloo on the routable address) across hosts, chosen explicitly,
    # and send/recv, which always run on them, between the first and the last rank.
    gx = dist.new_group(list(range(n)), engine="xla")
    got["xla_all_reduce"] = np.asarray(dist.all_reduce(mine, group=gx))
    got["engine/explicit"] = _engine(gx)
    if r == 0:
        dist.send(mine, dst=n - 1)
    elif r == n - 1:
        got["recv"] = np.asarray(dist.recv(jnp.zeros_like(mine), src=0))

    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    nd = jax.device_count()
    got["devices"] = [nd, jax.local_device_count()]
    mesh = jax.make_mesh((nd,), ("i",))
    blocks = spmd_blocks(nd)
    arr = jax.make_array_from_callback(
        blocks.shape, NamedSharding(mesh, P("i")), lambda idx: blocks[idx]
    )
    f = jax.jit(
        jax.shard_map(lambda v: jax.lax.psum(v, "i"), mesh=mesh, in_specs=P("i"), out_specs=P("i"))
    )
    got["spmd_shards"] = [np.asarray(shard.data) for shard in f(arr).addressable_shards]
    dist.destroy_process_group()
    hand_back(got)


def spmd_blocks(nd: int) -> np.ndarray:
    """The ``(nd, 2, 3)`` array the psum program shards over ``nd`` devices."""
    return np.arange(nd * 6, dtype=np.float32).reshape(nd, 2, 3)


def _engine(group: object) -> str:
    from tensorplay_jax.process_group import _group as pg

    return (group or pg.world().world).engine.name
