"""Worker code for the process-group tests: each function runs in every rank (``tests._procs``)."""

from __future__ import annotations

import os
import sys
import time

import jax.numpy as jnp
import ml_dtypes
import numpy as np

import tensorplay_jax.distributed as dist
from tensorplay_jax.process_group import _group as pg
from tensorplay_jax.runtime.settings import PG_SHM_DEPTH


def values() -> None:
    engine = sys.argv[1]
    dist.init_process_group("gloo", timeout=60, engine=engine)
    r, n = dist.get_rank(), dist.get_world_size()
    assert dist.is_initialized() and dist.get_backend() == "gloo"

    def inputs(k, shape=(3, 5), dtype=np.float32):
        x = np.arange(np.prod(shape)).reshape(shape) % 7 + k + 1
        return x.astype(dtype)

    def close(got, want, **kw):
        got = np.asarray(got)
        assert got.shape == np.shape(want), (got.shape, np.shape(want))
        np.testing.assert_allclose(got.astype(np.float64), np.asarray(want, np.float64), **kw)

    # Small inputs take the shared-memory engine's one-meeting path, large ones its slots.
    CASES = [
        (np.float32, (3, 5), (n, 2, 3)),
        (np.int32, (3, 5), (n, 2, 3)),
        (ml_dtypes.bfloat16, (3, 5), (n, 2, 3)),
        (np.float32, (600, 500), (n, 600, 500)),
    ]
    for dtype, shape, sshape in CASES:
        xs = [inputs(k, shape=shape, dtype=dtype) for k in range(n)]
        mine = jnp.asarray(xs[r])
        stack = np.stack(xs)
        ops = {"sum": stack.sum(0), "max": stack.max(0), "min": stack.min(0), "prod": stack.prod(0)}
        if dtype != np.int32:
            ops["avg"] = stack.astype(np.float64).mean(0)
        for op, want in ops.items():
            y = dist.all_reduce(mine, op=op)
            assert y.dtype == mine.dtype, (op, y.dtype)
            close(y, want, rtol=2e-2 if dtype == ml_dtypes.bfloat16 else 1e-6)
        close(dist.all_reduce(mine, op=dist.ReduceOp.MAX), stack.max(0))
        for root in range(n):
            close(dist.broadcast(mine, src=root), xs[root])
            y = dist.reduce(mine, dst=root, op="sum")
            close(y, stack.sum(0) if r == root else np.zeros_like(xs[0]))
            y = dist.gather(mine, dst=root)
            close(y, stack if r == root else np.zeros_like(stack))
        close(dist.all_gather(mine), stack)

        # (N, ...) inputs: row j is meant for rank j.
        ss = [inputs(k, shape=sshape, dtype=dtype) * (k + 2) for k in range(n)]
        sm = jnp.asarray(ss[r])
        for root in range(n):
            close(dist.scatter(sm, src=root), ss[root][r])
        close(dist.reduce_scatter(sm), sum(s.astype(np.float64) for s in ss)[r], rtol=2e-2)
        close(dist.reduce_scatter(sm, op="max"), np.max(np.stack(ss), 0)[r])
        close(dist.all_to_all(sm), np.stack([ss[j][r] for j in range(n)]))

    # Scalars, numpy inputs, an empty array.
    close(dist.all_reduce(np.float32(r + 1)), sum(range(1, n + 1)))
    close(dist.broadcast(np.int32(r * 10), src=n - 1), (n - 1) * 10)
    close(dist.all_gather(np.zeros((0, 3), np.float32)), np.zeros((n, 0, 3)))

    # all_to_all_single, even and uneven (rank k sends j + k + 1 rows to rank j).
    ins = [[j + k + 1 for j in range(n)] for k in range(n)]
    a = [np.arange(sum(ins[k]) * 2, dtype=np.float32).reshape(-1, 2) + 1000 * k for k in range(n)]
    outs = [ins[j][r] for j in range(n)]
    want = np.concatenate([a[j][sum(ins[j][:r]) : sum(ins[j][:r]) + ins[j][r]] for j in range(n)])
    close(dist.all_to_all_single(jnp.asarray(a[r]), outs, ins[r]), want)
    w = [
        np.arange(sum(ins[k]) * 100000, dtype=np.float32).reshape(-1, 100000) + k for k in range(n)
    ]
    want = np.concatenate([w[j][sum(ins[j][:r]) : sum(ins[j][:r]) + ins[j][r]] for j in range(n)])
    close(dist.all_to_all_single(w[r], outs, ins[r]), want)
    e = [np.arange(2 * n, dtype=np.float32) + 100 * k for k in range(n)]
    close(dist.all_to_all_single(e[r]), np.concatenate([e[j][2 * r : 2 * r + 2] for j in range(n)]))

    # send / recv: even ranks send first, odd ranks receive first (no cycle of blocked sends).
    peer_next, peer_prev = (r + 1) % n, (r - 1) % n
    payload = [np.full((4, 2), 10.0 * k + 1, np.float32) for k in range(n)]
    if r % 2 == 0:
        dist.send(jnp.asarray(payload[r]), dst=peer_next)
        got = dist.recv(np.zeros((4, 2), np.float32), src=peer_prev)
    else:
        got = dist.recv(np.zeros((4, 2), np.float32), src=peer_prev)
        dist.send(payload[r], dst=peer_next)
    close(got, payload[peer_prev])

    # Larger than the first shared-memory slot: the segment grows, values stay right.
    big = np.arange(3 << 20, dtype=np.float32) % 1000 + r
    yb = np.asarray(dist.all_reduce(big))
    np.testing.assert_array_equal(
        yb, (np.arange(3 << 20, dtype=np.float32) % 1000) * n + sum(range(n))
    )

    # A subgroup of ranks {0, n-1}; others skip its collectives.
    g = dist.new_group([n - 1, 0])
    assert g.ranks == (0, n - 1) and g.size() == 2
    if r in (0, n - 1):
        assert dist.get_rank(g) == (0 if r == 0 else 1)
        close(dist.all_reduce(jnp.asarray(xs[r]), group=g), xs[0].astype(np.float64) + xs[n - 1])
        close(dist.broadcast(jnp.asarray(xs[r]), src=n - 1, group=g), xs[n - 1])
    else:
        assert dist.get_rank(g) == -1
    dist.barrier()
    dist.barrier(group=g) if r in (0, n - 1) else None
    dist.destroy_process_group()
    assert not dist.is_initialized()
    print("VALUES-OK", r)


def cache() -> None:
    dist.init_process_group("gloo", timeout=60, engine="xla")
    r = dist.get_rank()
    eng = pg.world().world.engine
    assert eng.name == "xla"
    x = jnp.arange(8.0) + r
    dist.all_reduce(x)
    traces, programs = eng.traces, len(eng.programs)
    (prog,) = eng.programs.values()
    for _ in range(5):
        dist.all_reduce(x + 1)
    assert eng.traces == traces and len(eng.programs) == programs, (eng.traces, eng.programs)
    assert prog._cache_size() == 1, prog._cache_size()
    dist.all_reduce(jnp.arange(4.0))  # a new shape compiles once more
    dist.all_reduce(jnp.arange(4.0))
    dist.all_reduce(x, op="max")  # a new op too
    assert eng.traces == traces + 2 and len(eng.programs) == programs + 2
    dist.destroy_process_group()

    # The shared-memory engine: slots grow once, then are reused.
    dist.init_process_group("gloo", timeout=60, engine="shm")
    eng = pg.world().world.engine
    assert eng.name == "shm"
    dist.all_reduce(np.ones(1 << 19, np.float32))
    gen = eng.gen
    for _ in range(3):
        dist.all_reduce(np.ones(1 << 19, np.float32))
    assert eng.gen == gen
    dist.all_reduce(np.ones(1 << 20, np.float32))
    assert eng.gen == gen + 1
    dist.destroy_process_group()
    print("CACHE-OK", r)


def errors() -> None:
    port = int(sys.argv[1])
    r = int(os.environ["RANK"])

    def expect(exc, text, fn, *args, **kwargs):
        try:
            fn(*args, **kwargs)
        except exc as e:
            assert text in str(e), f"expected {text!r} in {e!r}"
            return
        raise AssertionError(f"{fn.__name__} did not raise {exc.__name__}({text!r})")

    for i, engine in enumerate(("shm", "xla", "tcp")):
        if i == 0:
            dist.init_process_group("gloo", f"tcp://127.0.0.1:{port}", 30, 2, r, engine=engine)
        else:
            dist.init_process_group("gloo", timeout=30, engine=engine)
        expect(RuntimeError, "already initialized", dist.init_process_group, "gloo")
        x = jnp.ones(4)
        expect(
            ValueError,
            "all_reduce: shape mismatch across ranks (rank 0: (2,), rank 1: (3,))",
            dist.all_reduce,
            np.ones(2 + r, np.float32),
        )
        expect(
            ValueError,
            "all_gather: dtype mismatch across ranks",
            dist.all_gather,
            np.ones(2, [np.float32, np.int32][r]),
        )
        expect(
            ValueError,
            "different collectives (rank 0: all_reduce, rank 1: all_gather)",
            dist.all_reduce if r == 0 else dist.all_gather,
            x,
        )
        expect(
            ValueError,
            "reduce: ranks disagree on src/dst (rank 0: 0, rank 1: 1)",
            dist.reduce,
            x,
            dst=r,
        )
        if engine in ("xla", "tcp"):
            expect(
                ValueError,
                "broadcast: ranks disagree on src/dst (rank 0: 0, rank 1: 1)",
                dist.broadcast,
                x,
                src=r,
            )
            expect(
                ValueError,
                "broadcast: shape mismatch across ranks",
                dist.broadcast,
                np.ones(2 + r, np.float32),
                src=0,
            )
        else:
            # A small broadcast's src does not wait for the receivers: its disagreement
            # surfaces on the receivers at once and on the src at its next call, which
            # then runs on no rank.
            dist.broadcast(x, src=r)  # both think they are src: neither waits
            expect(
                ValueError,
                "all_reduce: not run, because an earlier call this rank made as src",
                dist.all_reduce,
                x,
            )
            if r == 0:
                dist.broadcast(np.ones(2, np.float32), src=0)
            else:
                expect(
                    ValueError,
                    "shape mismatch across ranks (rank 0: (2,), rank 1: (3,))",
                    dist.broadcast,
                    np.ones(3, np.float32),
                    src=0,
                )
            expect(ValueError, "all_gather: not run, because an earlier call", dist.all_gather, x)
            # A src running broadcasts ahead validates each at the latest PG_SHM_DEPTH - 1
            # calls later; the calls in between run, the one that finds it runs nowhere.
            if r == 0:
                dist.broadcast(np.ones(2, np.float32), src=0)
            else:
                expect(
                    ValueError,
                    "shape mismatch across ranks",
                    dist.broadcast,
                    np.ones(3, np.float32),
                    src=0,
                )
            for _ in range(PG_SHM_DEPTH - 2):
                assert float(dist.broadcast(x * (1 + r), src=0)[0]) == 1.0
            expect(
                ValueError, "broadcast: not run, because an earlier call", dist.broadcast, x, src=0
            )
            assert float(dist.all_reduce(x)[0]) == 2.0  # and the group works on
        expect(
            ValueError,
            "broadcast: src=5 is out of range; valid ranks are 0..1",
            dist.broadcast,
            x,
            src=5,
        )
        expect(ValueError, "reduce: dst=-1 is out of range", dist.reduce, x, dst=-1)
        expect(TypeError, "gather: dst=0.0 must be an int rank", dist.gather, x, dst=0.0)
        expect(
            ValueError,
            "scatter: tensor must have a leading axis of the group size 2",
            dist.scatter,
            np.ones((3, 2)),
            src=0,
        )
        expect(
            ValueError,
            "does not match what the others send it",
            dist.all_to_all_single,
            np.ones((4, 2)),
            [1, 3] if r == 0 else None,
        )
        expect(
            ValueError,
            "input_split_sizes=[1, 1] sum to 2, but tensor has 4 rows",
            dist.all_to_all_single,
            np.ones(4),
            None,
            [1, 1],
        )
        expect(
            TypeError,
            "all_reduce: op='avg' needs a floating or complex input",
            dist.all_reduce,
            np.ones(3, np.int32),
            op="avg",
        )
        expect(ValueError, "all_reduce: unknown op='median'", dist.all_reduce, x, op="median")
        expect(ValueError, f"send: dst={r} is this process's own rank", dist.send, x, dst=r)
        if r == 0:
            expect(ValueError, "send: shape mismatch across ranks", dist.send, np.ones(2), dst=1)
        else:
            expect(ValueError, "recv: shape mismatch across ranks", dist.recv, np.ones(3), src=0)
        solo = dist.new_group([0])
        expect(
            ValueError,
            "new_group: ranks=[0, 7] must be distinct ranks in 0..1 ([7] out of range)",
            dist.new_group,
            [0, 7],
        )
        if r == 1:
            expect(
                ValueError,
                "rank 1 is not a member of the group with ranks [0]",
                dist.all_reduce,
                x,
                group=solo,
            )
        else:
            expect(
                ValueError,
                "broadcast: src=1 is not a member of the group [0]",
                dist.broadcast,
                x,
                src=1,
                group=solo,
            )
            np.testing.assert_allclose(dist.all_reduce(x, group=solo), x)
        # Validation errors leave the group usable.
        np.testing.assert_allclose(dist.all_reduce(x), 2 * x)
        dist.destroy_process_group()
        expect(RuntimeError, "has not been initialized", dist.all_reduce, x)
    print("ERRORS-OK", r)


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
        time.sleep(7)  # alive, but never joins
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


def tcp_hierarchical() -> None:
    # The tcp engine with members on two "hosts" (two per host, faked on loopback):
    # all_reduce runs as shm reduce-scatter, a ring across hosts, shm all-gather.
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
    assert eng.local is not None and eng.local.n == n // 2, eng.local
    for dtype in (np.float32, np.int32, ml_dtypes.bfloat16):
        for shape in ((1,), (7,), (3, 5), (1001, 3), (1 << 19,)):
            base = np.arange(np.prod(shape)).reshape(shape) % 11
            xs = [(base + k + 1).astype(dtype) for k in range(n)]
            stack = np.stack(xs)
            ops = {"sum": stack.sum(0), "max": stack.max(0), "min": stack.min(0)}
            if dtype != np.int32:
                ops["avg"] = stack.astype(np.float64).mean(0)
            for name, want in ops.items():
                op = dist.ReduceOp[name.upper()]
                d = descriptor.encode(
                    n, "all_reduce", descriptor.dtype_code("t", dtype), shape, reduce_op=op
                )
                got = np.asarray(eng.all_reduce(xs[r], op, d))
                assert got.shape == shape and got.dtype == dtype, (got.shape, got.dtype)
                tol = 2e-2 if dtype == ml_dtypes.bfloat16 else 1e-6
                np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol)
    eng.close()
    dist.destroy_process_group()
    print("HIER-OK", r, flush=True)
