"""Worker code for the process-group API tests (async handles, p2p, objects, rank maps, ...).

One function runs every check in each rank (``tests._procs``), so a world size
costs one launch. Every rank builds every rank's input (``_inputs(k)``) and checks
its own result against numpy computed from all of them.
"""

from __future__ import annotations

import sys

import jax.numpy as jnp
import numpy as np

import tensorplay_jax.distributed as dist
from tensorplay_jax.process_group import _group as pg
from tests._worker import expect


def _inputs(k: int, shape: tuple[int, ...] = (3, 4)) -> np.ndarray:
    return (np.arange(np.prod(shape)).reshape(shape) % 7 * (k + 1) + k).astype(np.float32)


def _close(got, want) -> None:
    got = np.asarray(got)
    assert got.shape == np.shape(want), (got.shape, np.shape(want))
    np.testing.assert_allclose(got, want, rtol=1e-6)


def api() -> None:
    engine = sys.argv[1]
    dist.init_process_group("gloo", timeout=60, engine=engine)
    r, n = dist.get_rank(), dist.get_world_size()
    _basics(r, n)
    _async(r, n)
    _tensor_forms(r, n)
    _p2p(r, n)
    _objects(r, n)
    _subgroups(r, n)
    _monitored(r, n)
    w = dist.isend(np.ones(2), dst=(r + 1) % n)  # queued, never run
    dist.destroy_process_group()
    expect(RuntimeError, ["isend: not run: destroy_process_group() ran first"], w.wait)
    assert dist.GroupMember.WORLD is None and not dist.is_initialized()
    print("API-OK", r, flush=True)


def _basics(r: int, n: int) -> None:
    assert dist.is_available() and dist.is_initialized() and dist.get_backend() == "gloo"
    assert dist.GroupMember.WORLD is pg.world().world is dist.group.WORLD
    assert dist.get_process_group_ranks(None) == list(range(n))
    assert dist.get_process_group_ranks(dist.group.WORLD) == list(range(n))
    sub = dist.new_group([n - 1, 0])
    assert dist.get_process_group_ranks(sub) == [0, n - 1]
    assert dist.get_global_rank(sub, 1) == n - 1 and dist.get_global_rank(sub, 0) == 0
    assert dist.get_group_rank(sub, n - 1) == 1 and dist.get_group_rank(sub, 0) == 0
    expect(
        ValueError, ["get_global_rank: group_rank=2 is not a rank"], dist.get_global_rank, sub, 2
    )
    expect(ValueError, [f"global rank {n} is not part of the group"], dist.get_group_rank, sub, n)
    expect(TypeError, ["is not a ProcessGroup"], dist.get_process_group_ranks, "world")


def _async(r: int, n: int) -> None:
    xs = [_inputs(k) for k in range(n)]
    stack = np.stack(xs)
    mine = jnp.asarray(xs[r])
    w = dist.all_reduce(mine, async_op=True)
    assert isinstance(w, dist.Work) and w.wait() is True and w.wait(timeout=5) is True
    assert w.is_completed() and w.is_success() and w.exception() is None
    _close(w.result(), stack.sum(0))
    fut = w.get_future()
    assert fut.done()
    _close(fut.wait(), stack.sum(0))
    _close(fut.value(), stack.sum(0))
    _close(fut.then(lambda f: np.asarray(f.value()) * 2).wait(), 2 * stack.sum(0))
    assert dist.all_reduce(mine, op="max") is not None  # blocking calls return as before

    ss = [_inputs(k, (n, 2, 3)) for k in range(n)]
    sm = jnp.asarray(ss[r])
    root = n - 1
    cases = [
        (dist.all_reduce(mine, op="min", async_op=True), stack.min(0)),
        (dist.broadcast(mine, src=root, async_op=True), xs[root]),
        (
            dist.reduce(mine, dst=root, async_op=True),
            stack.sum(0) if r == root else np.zeros_like(xs[0]),
        ),
        (dist.all_gather(mine, async_op=True), stack),
        (dist.gather(mine, dst=0, async_op=True), stack if r == 0 else np.zeros_like(stack)),
        (dist.scatter(sm, src=root, async_op=True), ss[root][r]),
        (dist.reduce_scatter(sm, async_op=True), np.sum(ss, 0)[r]),
        (dist.all_to_all(sm, async_op=True), np.stack([ss[j][r] for j in range(n)])),
        (
            dist.all_to_all_single(np.arange(2 * n, dtype=np.float32) + 100 * r, async_op=True),
            np.concatenate([np.arange(2 * r, 2 * r + 2) + 100.0 * j for j in range(n)]),
        ),
    ]
    for work, want in cases:
        assert isinstance(work, dist.Work), work
        assert work.wait() and work.is_completed()
        _close(work.result(), want)
        _close(work.get_future().value(), want)
    b = dist.barrier(async_op=True)
    assert b.wait() is True and b.result() is None
    assert dist.barrier() is None


def _tensor_forms(r: int, n: int) -> None:
    xs = [_inputs(k, (2, 3)) for k in range(n)]
    y = dist.all_gather_into_tensor(np.zeros((2 * n, 3), np.float32), jnp.asarray(xs[r]))
    _close(y, np.concatenate(xs))
    y = dist.all_gather_into_tensor(jnp.zeros((n, 2, 3)), xs[r])
    _close(y, np.stack(xs))
    w = dist.all_gather_into_tensor(np.zeros(n, np.float32), np.float32(r + 0.5), async_op=True)
    _close(w.result(), np.arange(n) + 0.5)
    _close(dist.all_gather(np.float32(r + 0.5)), np.arange(n) + 0.5)  # 0-d, every engine
    # (N,) rows of 0-d pieces: row j of rank r is r * N + j
    _close(dist.all_to_all(np.arange(n, dtype=np.float32) + r * n), np.arange(n) * n + r)
    g = dist.gather(np.float32(r + 0.25), dst=0)
    if r == 0:
        _close(g, np.arange(n) + 0.25)
    expect(
        ValueError,
        [f"all_gather_into_tensor: output_tensor has shape (5,); for an input of shape (2, 3) "
         f"and a group of {n} it must be ({2 * n}, 3) (concatenated) or ({n}, 2, 3)"],
        dist.all_gather_into_tensor, np.zeros(5, np.float32), xs[r],
    )  # fmt: skip
    expect(
        TypeError,
        ["output dtype int32 differs from the input's float32"],
        dist.all_gather_into_tensor,
        np.zeros((n, 2, 3), np.int32),
        xs[r],
    )

    ins = [_inputs(k, (n * 2, 3)) for k in range(n)]  # rows 2j, 2j+1 are for rank j
    total = np.sum(ins, 0)
    y = dist.reduce_scatter_tensor(np.zeros((2, 3), np.float32), jnp.asarray(ins[r]))
    _close(y, total[2 * r : 2 * r + 2])
    y = dist.reduce_scatter_tensor(jnp.zeros((2, 3)), ins[r].reshape(n, 2, 3), op="max")
    _close(y, np.max(ins, 0)[2 * r : 2 * r + 2])
    w = dist.reduce_scatter_tensor(np.zeros(1, np.float32), ins[r][:n, 0], async_op=True)
    _close(w.result(), total[r : r + 1, 0])
    expect(
        ValueError,
        ["reduce_scatter_tensor: input has shape (3,)"],
        dist.reduce_scatter_tensor,
        np.zeros(2, np.float32),
        np.zeros(3, np.float32),
    )


def _p2p(r: int, n: int) -> None:
    nxt, prv = (r + 1) % n, (r - 1) % n
    pay = [np.full((4, 2), 10.0 * k + 1, np.float32) for k in range(n)]
    zeros = np.zeros((4, 2), np.float32)

    # Everyone sends first, then receives (a ring): tensorplay code's usual shape.
    s = dist.isend(jnp.asarray(pay[r]), dst=nxt)
    q = dist.irecv(zeros, src=prv)
    assert isinstance(s, dist.Work) and isinstance(q, dist.Work)
    assert s.wait() is True and s.result() is None
    assert q.is_completed()
    _close(q.result(), pay[prv])

    # Both directions with each neighbour in one batch, listed receives first.
    ops = [
        dist.P2POp(dist.irecv, zeros, prv),
        dist.P2POp(dist.irecv, zeros + 0, nxt),
        dist.P2POp(dist.isend, pay[r] * 2, nxt),
        dist.P2POp(dist.isend, pay[r] * 3, prv),
    ]
    works = dist.batch_isend_irecv(ops)
    assert len(works) == 4
    for w in works:
        w.wait()
    _close(works[0].result(), pay[prv] * 2)
    _close(works[1].result(), pay[nxt] * 3)

    # Several queued to one peer stay in order; futures drive the queue too.
    partner = r ^ 1 if (r ^ 1) < n else r
    if partner != r:
        sends = [dist.isend(pay[r] + i, dst=partner) for i in range(3)]
        recvs = [dist.irecv(zeros, src=partner) for _ in range(3)]
        f = recvs[2].get_future().then(lambda fut: np.asarray(fut.value()).sum())
        assert float(f.wait()) == float((pay[partner] + 2).sum())
        for i, w in enumerate(recvs):
            _close(w.result(), pay[partner] + i)
        assert all(w.is_completed() for w in sends)

    # A queued isend runs before the next collective, which the receiver reaches after recv.
    if r % 2 == 0 and r + 1 < n:
        w = dist.isend(pay[r], dst=r + 1)
        _close(dist.all_reduce(np.ones(2, np.float32)), np.full(2, n))
        assert w.is_completed()
    elif r % 2 == 1:
        _close(dist.recv(zeros, src=r - 1), pay[r - 1])
        _close(dist.all_reduce(np.ones(2, np.float32)), np.full(2, n))
    else:
        _close(dist.all_reduce(np.ones(2, np.float32)), np.full(2, n))

    # send/recv with async_op, and group-relative peers.
    sub = dist.new_group([0, n - 1])
    if r == 0:
        dist.send(pay[0], dst=n - 1, async_op=True).wait()
        _close(dist.recv(zeros, group=sub, group_src=1), pay[n - 1])
    elif r == n - 1:
        _close(dist.recv(zeros, src=0, async_op=True).result(), pay[0])
        dist.send(pay[n - 1], group=sub, group_dst=0)

    expect(ValueError, ["irecv: src is required"], dist.irecv, zeros)
    expect(ValueError, [f"isend: dst={r} is this process's own rank"], dist.isend, zeros, r)
    expect(ValueError, ["P2POp: op=", "must be tensorplay_jax.distributed.isend or irecv"],
           dist.P2POp, dist.send, zeros, nxt)  # fmt: skip
    expect(ValueError, ["non-empty list of P2POp"], dist.batch_isend_irecv, [])
    expect(ValueError, ["batch_isend_irecv: p2p_op_list"], dist.batch_isend_irecv, [zeros])
    assert not pg.world().pending
    dist.barrier()


class _Point:
    def __init__(self, x: int) -> None:
        self.x = x

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Point) and other.x == self.x


def _obj(k: int) -> dict:
    return {"rank": k, "items": list(range(3 * k)), "text": "x" * (50 * k), "p": _Point(k)}


def _objects(r: int, n: int) -> None:
    objs = [_obj(k) for k in range(n)]
    out = [None] * n
    assert dist.all_gather_object(out, objs[r]) is None
    assert out == objs, out
    fns = [None] * n
    dist.all_gather_object(fns, lambda v, k=r: v * 10 + k)  # cloudpickle: lambdas travel
    assert [f(1) for f in fns] == [10 + k for k in range(n)]

    for src in range(n):
        lst = [objs[src], ("t", src), None] if r == src else [None] * 3
        dist.broadcast_object_list(lst, src=src)
        assert lst == [objs[src], ("t", src), None], lst

        got = [None] * n if r == src else None
        dist.gather_object(objs[r], got, dst=src)
        assert got == (objs if r == src else None), got

        items = [(src, j, "y" * (7 * j)) for j in range(n)]
        box = [None]
        dist.scatter_object_list(box, items if r == src else None, src=src)
        assert box == [(src, r, "y" * (7 * r))], box

    pair = dist.new_group([n - 1, 0])
    if r in (0, n - 1):
        lst = [("from", n - 1), n - 1] if r == n - 1 else [None, None]
        dist.broadcast_object_list(lst, group=pair, group_src=1)
        assert lst == [("from", n - 1), n - 1], lst

    # send/recv_object_list around the ring; even ranks send first.
    nxt, prv = (r + 1) % n, (r - 1) % n
    mine = [objs[r], {"to": nxt}]
    got = [None, None]
    if r % 2 == 0:
        dist.send_object_list(mine, dst=nxt)
        assert dist.recv_object_list(got, src=prv) == prv
    else:
        assert dist.recv_object_list(got, src=prv) == prv
        dist.send_object_list(mine, dst=nxt)
    assert got == [objs[prv], {"to": r}], got
    expect(ValueError, ["all_gather_object: object_list must be a list of at least"],
           dist.all_gather_object, [None] * (n - 1), 1)  # fmt: skip
    dist.barrier()


def _subgroups(r: int, n: int) -> None:
    mine, groups = dist.new_subgroups(2)
    assert [g.ranks for g in groups] == [(i, i + 1) for i in range(0, n, 2)]
    assert mine is groups[r // 2] and dist.get_rank(mine) == r % 2
    lo = r - r % 2
    _close(dist.all_reduce(np.float32(r + 1), group=mine), (lo + 1) + (lo + 2))
    mine, groups = dist.new_subgroups()  # default: the ranks on this host (all of them)
    assert len(groups) == 1 and mine.ranks == tuple(range(n))
    if n == 4:
        sub = dist.new_group([1, 2, 3, 0])
        mine, groups = dist.new_subgroups(1, group=sub)
        assert [g.ranks for g in groups] == [(0,), (1,), (2,), (3,)] and mine.ranks == (r,)
    if n == 4:
        expect(ValueError, ["the group's size 4 must be divisible by group_size=3"],
               dist.new_subgroups, 3)  # fmt: skip
    expect(ValueError, ["group_size=0 must be a positive int"], dist.new_subgroups, 0)


def _monitored(r: int, n: int) -> None:
    assert dist.monitored_barrier(timeout=30) is None
    assert dist.monitored_barrier(wait_all_ranks=True) is None
    # The upper half of the ranks never come: rank 0 names them, and so does every rank
    # that came. Without wait_all_ranks only the first missing rank is named.
    late = list(range(n // 2, n))
    if r not in late:
        first = f"Rank {late[0]} failed to pass monitoredBarrier in 2000 ms"
        expect(RuntimeError, [f"rank(s) [{late[0]}]", first], dist.monitored_barrier, None, 2)
        every = "Rank 1 failed" if n == 2 else "Ranks 2, 3 failed to pass monitoredBarrier"
        expect(RuntimeError, [str(late), every], dist.monitored_barrier, None, 2, True)
    dist.barrier()
