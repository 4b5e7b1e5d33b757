"""Worker code for the process-group tests: each function runs in every rank (``tests._procs``)."""

from __future__ import annotations

import os
import sys
import time
import warnings

import jax.numpy as jnp
import ml_dtypes
import numpy as np

import tensorplay_jax.distributed as dist
from tensorplay_jax.process_group import _group as pg
from tensorplay_jax.runtime.settings import PG_SHM_DEPTH
from tests._worker import error_text, hand_back
from tests.distributed import _pg_cases as C


def values() -> None:
    """Every collective on ``_pg_cases`` inputs; hands back what each returned (keyed as
    ``_pg_cases.expected``) and the group's state around it."""
    engine = sys.argv[1]
    dist.init_process_group("gloo", timeout=60, engine=engine)
    r, n = dist.get_rank(), dist.get_world_size()
    got = {"state/initialized": dist.is_initialized(), "state/backend": dist.get_backend()}
    for dtype, shape, sshape in C.cases(n, engine):
        t = C.tag(dtype, shape)
        xs = [C.inputs(k, shape, dtype) for k in range(n)]
        mine = jnp.asarray(xs[r])
        for op in C.reduce_ops(dtype):
            got[f"all_reduce/{t}/{op}"] = np.asarray(dist.all_reduce(mine, op=op))
        got[f"all_reduce/{t}/ReduceOp.MAX"] = np.asarray(
            dist.all_reduce(mine, op=dist.ReduceOp.MAX)
        )
        for root in range(n):
            got[f"broadcast/{t}/src{root}"] = np.asarray(dist.broadcast(mine, src=root))
            got[f"reduce/{t}/dst{root}"] = np.asarray(dist.reduce(mine, dst=root, op="sum"))
            got[f"gather/{t}/dst{root}"] = np.asarray(dist.gather(mine, dst=root))
        got[f"all_gather/{t}"] = np.asarray(dist.all_gather(mine))
        sm = jnp.asarray(C.scatter_inputs(n, sshape, dtype)[r])
        for root in range(n):
            got[f"scatter/{t}/src{root}"] = np.asarray(dist.scatter(sm, src=root))
        got[f"reduce_scatter/{t}/sum"] = np.asarray(dist.reduce_scatter(sm))
        got[f"reduce_scatter/{t}/max"] = np.asarray(dist.reduce_scatter(sm, op="max"))
        got[f"all_to_all/{t}"] = np.asarray(dist.all_to_all(sm))

    # Scalars, numpy inputs, an empty array.
    got["scalar/all_reduce"] = np.asarray(dist.all_reduce(np.float32(r + 1)))
    got["scalar/broadcast"] = np.asarray(dist.broadcast(np.int32(r * 10), src=n - 1))
    got["empty/all_gather"] = np.asarray(dist.all_gather(np.zeros((0, 3), np.float32)))

    # all_to_all_single, uneven (narrow and wide rows) and even.
    outs = [C.split_sizes(n)[j][r] for j in range(n)]
    ins = C.split_sizes(n)[r]
    a = C.split_inputs(n, 2, 1000)[r]
    got["all_to_all_single/uneven"] = np.asarray(dist.all_to_all_single(jnp.asarray(a), outs, ins))
    wide = C.split_inputs(n, 100000, 1)[r]
    got["all_to_all_single/uneven_wide"] = np.asarray(dist.all_to_all_single(wide, outs, ins))
    e = np.arange(2 * n, dtype=np.float32) + 100 * r
    got["all_to_all_single/even"] = np.asarray(dist.all_to_all_single(e))

    # send / recv: even ranks send first, odd ranks receive first (no cycle of blocked sends).
    nxt, prv = (r + 1) % n, (r - 1) % n
    if r % 2 == 0:
        dist.send(jnp.asarray(C.p2p_payload(r)), dst=nxt)
        got["send_recv/ring"] = np.asarray(dist.recv(np.zeros((4, 2), np.float32), src=prv))
    else:
        got["send_recv/ring"] = np.asarray(dist.recv(np.zeros((4, 2), np.float32), src=prv))
        dist.send(C.p2p_payload(r), dst=nxt)

    # Larger than the first shared-memory slot: the segment grows, values stay right.
    got["big/all_reduce"] = np.asarray(
        dist.all_reduce(np.arange(C.BIG, dtype=np.float32) % 1000 + r)
    )

    # A subgroup of ranks {0, n-1}; others skip its collectives.
    g = dist.new_group([n - 1, 0])
    got["subgroup_info/ranks"], got["subgroup_info/size"] = g.ranks, g.size()
    got["subgroup_info/rank"] = dist.get_rank(g)
    x0 = jnp.asarray(C.inputs(r, C.SUBGROUP_SHAPE))
    if r in (0, n - 1):
        got["subgroup/all_reduce"] = np.asarray(dist.all_reduce(x0, group=g))
        got["subgroup/broadcast"] = np.asarray(dist.broadcast(x0, src=n - 1, group=g))
    dist.barrier()
    dist.barrier(group=g) if r in (0, n - 1) else None
    dist.destroy_process_group()
    got["state/initialized_after_destroy"] = dist.is_initialized()
    hand_back(got)


def cache() -> None:
    """Hands back the xla engine's trace and program counts and the shared-memory engine's
    slot generation after each step (the test checks what changed)."""
    dist.init_process_group("gloo", timeout=60, engine="xla")
    r = dist.get_rank()
    eng = pg.world().world.engine
    got: dict[str, object] = {"xla/name": eng.name}
    x = jnp.arange(8.0) + r

    def counts() -> tuple[int, int]:
        return eng.traces, len(eng.programs)

    dist.all_reduce(x)
    got["xla/first"] = counts()
    (prog,) = eng.programs.values()
    for _ in range(5):
        dist.all_reduce(x + 1)
    got["xla/repeated"], got["xla/cache_size"] = counts(), prog._cache_size()
    dist.all_reduce(jnp.arange(4.0))  # a new shape compiles once more
    dist.all_reduce(jnp.arange(4.0))
    dist.all_reduce(x, op="max")  # a new op too
    got["xla/new_shape_and_op"] = counts()
    dist.destroy_process_group()

    # The shared-memory engine: slots grow once, then are reused.
    dist.init_process_group("gloo", timeout=60, engine="shm")
    eng = pg.world().world.engine
    got["shm/name"] = eng.name
    dist.all_reduce(np.ones(1 << 19, np.float32))
    got["shm/first"] = eng.gen
    for _ in range(3):
        dist.all_reduce(np.ones(1 << 19, np.float32))
    got["shm/repeated"] = eng.gen
    dist.all_reduce(np.ones(1 << 20, np.float32))
    got["shm/larger"] = eng.gen
    dist.destroy_process_group()
    hand_back(got)


def errors() -> None:
    """Bad calls on each engine in turn; hands back ``"{engine}/{case}"``: what each raised
    (``tests._worker.error_text``, None if it returned) or what a later call returned."""
    port = int(sys.argv[1])
    r = int(os.environ["RANK"])
    got: dict[str, object] = {}
    for i, engine in enumerate(("shm", "xla", "tcp")):

        def err(case: str, fn, *args, _engine: str = engine, **kwargs) -> None:
            got[f"{_engine}/{case}"] = error_text(fn, *args, **kwargs)

        if i == 0:
            dist.init_process_group("gloo", f"tcp://127.0.0.1:{port}", 30, 2, r, engine=engine)
        else:
            dist.init_process_group("gloo", timeout=30, engine=engine)
        err("init_twice", dist.init_process_group, "gloo")
        x = jnp.ones(4)
        err("shape_mismatch", dist.all_reduce, np.ones(2 + r, np.float32))
        err("dtype_mismatch", dist.all_gather, np.ones(2, [np.float32, np.int32][r]))
        err("different_collectives", dist.all_reduce if r == 0 else dist.all_gather, x)
        err("reduce_dst_disagrees", dist.reduce, x, dst=r)
        if engine in ("xla", "tcp"):
            err("broadcast_src_disagrees", dist.broadcast, x, src=r)
            err("broadcast_shape_mismatch", dist.broadcast, np.ones(2 + r, np.float32), src=0)
        else:
            # A small broadcast's src does not wait for the receivers: its disagreement
            # surfaces on the receivers at once and on the src at its next call, which
            # then runs on no rank.
            err("broadcast_both_src", dist.broadcast, x, src=r)  # neither waits
            err("after_both_src", dist.all_reduce, x)
            err(
                "broadcast_shape_mismatch_src_first",
                dist.broadcast,
                np.ones(2 + r, np.float32),
                src=0,
            )
            err("after_shape_mismatch", dist.all_gather, x)
            # A src running broadcasts ahead validates each at the latest PG_SHM_DEPTH - 1
            # calls later; the calls in between run, the one that finds it runs nowhere.
            err("broadcast_shape_mismatch_ahead", dist.broadcast, np.ones(2 + r, np.float32), src=0)
            got["shm/broadcasts_in_between"] = [
                float(dist.broadcast(x * (1 + r), src=0)[0]) for _ in range(PG_SHM_DEPTH - 2)
            ]
            err("broadcast_that_finds_it", dist.broadcast, x, src=0)
            got["shm/all_reduce_after_ahead"] = float(
                dist.all_reduce(x)[0]
            )  # and the group works on
        err("src_out_of_range", dist.broadcast, x, src=5)
        err("dst_negative", dist.reduce, x, dst=-1)
        err("dst_float", dist.gather, x, dst=0.0)
        err("scatter_leading_axis", dist.scatter, np.ones((3, 2)), src=0)
        err(
            "split_sizes_disagree",
            dist.all_to_all_single,
            np.ones((4, 2)),
            [1, 3] if r == 0 else None,
        )
        err("split_sizes_sum", dist.all_to_all_single, np.ones(4), None, [1, 1])
        err("avg_of_ints", dist.all_reduce, np.ones(3, np.int32), op="avg")
        err("unknown_op", dist.all_reduce, x, op="median")
        err("send_to_self", dist.send, x, dst=r)
        if r == 0:
            err("p2p_shape_mismatch", dist.send, np.ones(2), dst=1)
        else:
            err("p2p_shape_mismatch", dist.recv, np.ones(3), src=0)
        solo = dist.new_group([0])
        err("new_group_out_of_range", dist.new_group, [0, 7])
        if r == 1:  # as tensorplay's: a warning, and nothing done
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                returned = dist.all_reduce(x, group=solo)
            got[f"{engine}/non_member"] = [repr(returned), [str(w.message) for w in caught]]
        else:
            err("src_not_member", dist.broadcast, x, src=1, group=solo)
            got[f"{engine}/solo_all_reduce"] = np.asarray(dist.all_reduce(x, group=solo))
        # Validation errors leave the group usable.
        got[f"{engine}/all_reduce_after"] = np.asarray(dist.all_reduce(x))
        dist.destroy_process_group()
        err("after_destroy", dist.all_reduce, x)
    hand_back(got)


def _failure(call) -> dict[str, object]:
    """Run ``call``: how it failed (``types``: the exception's classes, empty if it returned)."""
    t0 = time.monotonic()
    try:
        call()
        types, message = [], ""
    except Exception as e:
        types, message = [c.__name__ for c in type(e).__mro__], str(e)
    return {"types": types, "message": message, "took": time.monotonic() - t0}


def missing() -> None:
    """Rank 1 never joins a collective (``stuck``) or dies (``exit``); rank 0 records how its
    calls fail in the JSON file ``sys.argv[3]`` (the test asserts on it)."""
    import json

    engine, mode, out = sys.argv[1], sys.argv[2], sys.argv[3]
    r = int(os.environ["RANK"])
    dist.init_process_group("gloo", timeout=2.0, engine=engine)
    x = np.ones(1000, np.float32)
    if r == 1:
        if mode == "exit":
            os._exit(0)  # dies without a word
        # Alive, but never joins, until rank 0 has recorded its failed calls.
        deadline = time.monotonic() + 30
        while not os.path.exists(out) and time.monotonic() < deadline:
            time.sleep(0.05)
        sys.exit(0)
    seen = {}
    if mode == "stuck":
        seen["barrier"] = _failure(lambda: dist.barrier(timeout=1.0))
    if mode == "exit":  # never wait for the lost peer at the runtime's shutdown barrier
        sys.excepthook = lambda *a: (sys.__excepthook__(*a), os._exit(1))
    seen["all_reduce"] = _failure(lambda: dist.all_reduce(x))
    seen["again"] = _failure(lambda: dist.all_reduce(x))
    with open(out, "w") as f:
        json.dump(seen, f)
    if mode == "exit":
        os._exit(0)


HIER_DTYPES = (np.float32, np.int32, ml_dtypes.bfloat16)
HIER_SHAPES = ((1,), (7,), (3, 5), (1001, 3), (1 << 19,))
HELD_SHAPE = (1 << 19,)  # 2 MiB of float32: large enough for the tcp engine's result pool


def hier_input(k: int, shape: tuple[int, ...], dtype: object) -> np.ndarray:
    """Rank ``k``'s input to the hierarchical all_reduce (small integers, exact in bfloat16)."""
    return (np.arange(np.prod(shape)).reshape(shape) % 11 + k + 1).astype(dtype)


def tcp_hierarchical() -> None:
    """The tcp engine with members on two "hosts" (half each, faked on loopback): hands back
    its local group's size and every all_reduce result, keyed ``"{dtype}{shape}/{op}"``."""
    from tensorplay_jax.process_group import _descriptor as descriptor
    from tensorplay_jax.process_group import _kv as kv
    from tensorplay_jax.process_group._engine_tcp import TcpEngine
    from tensorplay_jax.process_group.engine import GroupSpec

    dist.init_process_group("gloo", timeout=60, engine="tcp")
    r, n = dist.get_rank(), dist.get_world_size()
    hosts = ("a",) * (n // 2) + ("b",) * (n - n // 2)
    w = pg.world()
    eng = TcpEngine(
        GroupSpec(f"{w.prefix}/hier", tuple(range(n)), r, 60, tuple(w.devices), hosts,
                  secret=kv.job_secret())
    )  # fmt: skip
    got: dict[str, object] = {"local_n": None if eng.local is None else eng.local.n}
    for dtype in HIER_DTYPES:
        for shape in HIER_SHAPES:
            for name in ("sum", "max", "min") + (() if dtype == np.int32 else ("avg",)):
                op = dist.ReduceOp[name.upper()]
                d = descriptor.encode(
                    n, "all_reduce", descriptor.dtype_code("t", dtype), shape, reduce_op=op
                )
                key = f"{np.dtype(dtype).name}{shape}/{name}"
                got[key] = np.asarray(eng.all_reduce(hier_input(r, shape, dtype), op, d))
    eng.close()
    # The world group (one host: a plain ring). A result still held as a jax.Array
    # must survive the next call; once dropped, its buffer may serve a later one.
    x = jnp.asarray(hier_input(r, HELD_SHAPE, np.float32))
    first = dist.all_reduce(x)
    second = dist.all_reduce(x * 2)
    got["held/first"], got["held/second"] = np.array(first), np.array(second)
    del first, second
    got["held/third"] = np.array(dist.all_reduce(x * 3))
    dist.destroy_process_group()
    hand_back(got)
