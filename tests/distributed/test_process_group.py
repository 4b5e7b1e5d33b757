"""Blocking collectives on 2 and 4 real processes, both engines, against numpy oracles.

Every rank builds every rank's input deterministically (``_inputs(k)``), so each
checks its own result against a numpy reduction of all of them.
"""

import pytest

from tests._procs import run_workers

VALUES = r"""
import sys
import numpy as np
import jax.numpy as jnp
import ml_dtypes
import tensorplay_jax.distributed as dist

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
w = [np.arange(sum(ins[k]) * 100000, dtype=np.float32).reshape(-1, 100000) + k for k in range(n)]
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
np.testing.assert_array_equal(yb, (np.arange(3 << 20, dtype=np.float32) % 1000) * n + sum(range(n)))

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
"""

CACHE = r"""
import numpy as np
import jax.numpy as jnp
import tensorplay_jax.distributed as dist
from tensorplay_jax.distributed._pg import group as pg

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
"""


@pytest.mark.parametrize("engine", ["shm", "xla"])
@pytest.mark.parametrize("nprocs", [2, 4])
def test_collectives_match_numpy(engine, nprocs):
    res = run_workers(VALUES, nprocs, args=[engine], timeout=240)
    for w in res:
        assert f"VALUES-OK {w.rank}" in w.stdout, str(w)


def test_compiled_programs_are_cached_and_slots_reused():
    res = run_workers(CACHE, 2, timeout=120)
    for w in res:
        assert f"CACHE-OK {w.rank}" in w.stdout, str(w)
