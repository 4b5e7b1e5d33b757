"""Worker code for the process-group API tests (async handles, p2p, objects, rank maps, ...).

One function runs every call in each rank (``tests._procs``), so a world size costs
one launch, and hands back what each returned or raised (``tests._worker.hand_back``),
keyed ``"{section}/{case}"``; the tests compare with numpy computed from every rank's
input (:func:`inputs`).
"""

from __future__ import annotations

import datetime
import sys
import time

import jax.numpy as jnp
import numpy as np

import tensorplay_jax.distributed as dist
from tensorplay_jax.process_group import _group as pg
from tests._worker import error_text, hand_back


def inputs(k: int, shape: tuple[int, ...] = (3, 4)) -> np.ndarray:
    """Rank ``k``'s input."""
    return (np.arange(np.prod(shape)).reshape(shape) % 7 * (k + 1) + k).astype(np.float32)


def payload(k: int) -> np.ndarray:
    """What rank ``k`` sends its neighbours."""
    return np.full((4, 2), 10.0 * k + 1, np.float32)


def api() -> None:
    engine = sys.argv[1]
    dist.init_process_group("gloo", timeout=60, engine=engine)
    r, n = dist.get_rank(), dist.get_world_size()
    got: dict[str, object] = {}
    sections = (
        _basics,
        _async,
        _tensor_forms,
        _torch_forms,
        _p2p,
        _objects,
        _subgroups,
        _monitored,
    )
    for section in sections:
        got |= {f"{section.__name__[1:]}/{k}": v for k, v in section(r, n).items()}
    w = dist.isend(np.ones(2), dst=(r + 1) % n)  # queued, never run
    dist.destroy_process_group()
    got["destroy/queued_isend"] = error_text(w.wait)
    got["destroy/world"] = dist.GroupMember.WORLD
    got["destroy/initialized"] = dist.is_initialized()
    hand_back(got)


def _basics(r: int, n: int) -> dict[str, object]:
    sub = dist.new_group([n - 1, 0])
    return {
        "available": dist.is_available(),
        "initialized": dist.is_initialized(),
        "backend": dist.get_backend(),
        "world_is_one_group": dist.GroupMember.WORLD is pg.world().world is dist.group.WORLD,
        "ranks_none": dist.get_process_group_ranks(None),
        "ranks_world": dist.get_process_group_ranks(dist.group.WORLD),
        "ranks_sub": dist.get_process_group_ranks(sub),
        "global_ranks_sub": [dist.get_global_rank(sub, 0), dist.get_global_rank(sub, 1)],
        "group_ranks_sub": [dist.get_group_rank(sub, 0), dist.get_group_rank(sub, n - 1)],
        "global_rank_bad": error_text(dist.get_global_rank, sub, 2),
        "group_rank_bad": error_text(dist.get_group_rank, sub, n),
        "ranks_of_a_string": error_text(dist.get_process_group_ranks, "world"),
        "member_size_rank": [dist.get_world_size(sub), dist.get_rank(sub)],
        "member_backend": error_text(dist.get_backend, sub) or dist.get_backend(sub),
        **_group_timeout(r, n),
    }


def _group_timeout(r: int, n: int) -> dict[str, object]:
    """A group made with ``timeout=0.5 s``: rank 0 waits alone at its barrier."""
    lonely = dist.new_group(list(range(n)), timeout=datetime.timedelta(seconds=0.5))
    if r != 0:
        return {}
    t0 = time.monotonic()
    err = error_text(dist.barrier, lonely)
    return {"group_timeout": err, "group_timeout_s": time.monotonic() - t0}


def _work(w: object) -> dict[str, object]:
    """What a Work handle says about itself once waited on."""
    return {
        "is_work": isinstance(w, dist.Work),
        "wait": w.wait(),
        "completed": w.is_completed(),
        "result": np.asarray(w.result()),
        "future_value": np.asarray(w.get_future().value()),
    }


def _async(r: int, n: int) -> dict[str, object]:
    got: dict[str, object] = {}
    mine = jnp.asarray(inputs(r))
    w = dist.all_reduce(mine, async_op=True)
    got["sum/is_work"] = isinstance(w, dist.Work)
    got["sum/waits"] = [w.wait(), w.wait(timeout=5)]
    got["sum/state"] = [w.is_completed(), w.is_success(), w.exception()]
    got["sum/result"] = np.asarray(w.result())
    fut = w.get_future()
    got["sum/future_done"] = fut.done()
    got["sum/future_wait"] = np.asarray(fut.wait())
    got["sum/future_value"] = np.asarray(fut.value())
    got["sum/then"] = np.asarray(fut.then(lambda f: np.asarray(f.value()) * 2).wait())
    got["blocking_returns"] = dist.all_reduce(mine, op="max") is not None

    sm = jnp.asarray(inputs(r, (n, 2, 3)))
    root = n - 1
    cases = {
        "all_reduce_min": dist.all_reduce(mine, op="min", async_op=True),
        "broadcast": dist.broadcast(mine, src=root, async_op=True),
        "reduce": dist.reduce(mine, dst=root, async_op=True),
        "all_gather": dist.all_gather(mine, async_op=True),
        "gather": dist.gather(mine, dst=0, async_op=True),
        "scatter": dist.scatter(sm, src=root, async_op=True),
        "reduce_scatter": dist.reduce_scatter(sm, async_op=True),
        "all_to_all": dist.all_to_all(sm, async_op=True),
        "all_to_all_single": dist.all_to_all_single(
            np.arange(2 * n, dtype=np.float32) + 100 * r, async_op=True
        ),
    }
    for name, work in cases.items():
        got |= {f"{name}/{k}": v for k, v in _work(work).items()}
    b = dist.barrier(async_op=True)
    got["barrier"] = [b.wait(), b.result(), dist.barrier()]
    return got


def _tensor_forms(r: int, n: int) -> dict[str, object]:
    x = inputs(r, (2, 3))
    w = dist.all_gather_into_tensor(np.zeros(n, np.float32), np.float32(r + 0.5), async_op=True)
    ins = inputs(r, (n * 2, 3))  # rows 2j, 2j+1 are for rank j
    return {
        "agit_concat": np.asarray(
            dist.all_gather_into_tensor(np.zeros((2 * n, 3), np.float32), jnp.asarray(x))
        ),
        "agit_stacked": np.asarray(dist.all_gather_into_tensor(jnp.zeros((n, 2, 3)), x)),
        "agit_scalars_async": np.asarray(w.result()),
        "all_gather_0d": np.asarray(dist.all_gather(np.float32(r + 0.5))),
        # (N,) rows of 0-d pieces: row j of rank r is r * N + j
        "all_to_all_0d": np.asarray(dist.all_to_all(np.arange(n, dtype=np.float32) + r * n)),
        "gather_0d": np.asarray(dist.gather(np.float32(r + 0.25), dst=0)),
        "agit_bad_shape": error_text(dist.all_gather_into_tensor, np.zeros(5, np.float32), x),
        "agit_bad_dtype": error_text(dist.all_gather_into_tensor, np.zeros((n, 2, 3), np.int32), x),
        "rst_concat": np.asarray(
            dist.reduce_scatter_tensor(np.zeros((2, 3), np.float32), jnp.asarray(ins))
        ),
        "rst_stacked_max": np.asarray(
            dist.reduce_scatter_tensor(jnp.zeros((2, 3)), ins.reshape(n, 2, 3), op="max")
        ),
        "rst_async": np.asarray(
            dist.reduce_scatter_tensor(np.zeros(1, np.float32), ins[:n, 0], async_op=True).result()
        ),
        "rst_bad_shape": error_text(
            dist.reduce_scatter_tensor, np.zeros(2, np.float32), np.zeros(3, np.float32)
        ),
    }


def _torch_forms(r: int, n: int) -> dict[str, object]:
    """tensorplay's forms: Tensors filled in place, output lists first."""
    import tensorplay_jax as tp
    from tensorplay_jax import profiler as tp_profiler
    from tensorplay_jax.autograd import profiler

    def mine(k: int) -> tp.Tensor:
        return tp.tensor(inputs(k, (2, 3)))

    got: dict[str, object] = {}
    t = mine(r)
    got["all_reduce/returns"] = repr(dist.all_reduce(t))
    got["all_reduce"] = t.numpy()
    b = mine(r)
    dist.broadcast(b, src=n - 1)
    got["broadcast"] = b.numpy()
    red = mine(r)
    dist.reduce(red, dst=0, op="max")
    got["reduce"] = red.numpy()
    outs = [tp.zeros(2, 3) for _ in range(n)]
    dist.all_gather(outs, mine(r))
    got["all_gather"] = np.stack([o.numpy() for o in outs])
    slots = [None] * n  # a list of arrays gets the results in its slots
    dist.all_gather(slots, jnp.asarray(inputs(r, (2, 3))))
    got["all_gather/array_slots"] = np.stack([np.asarray(s) for s in slots])
    gathered = [tp.zeros(2, 3) for _ in range(n)] if r == 0 else None
    dist.gather(mine(r), gathered, dst=0)
    got["gather"] = np.stack([g.numpy() for g in gathered]) if r == 0 else None
    got["gather/list_off_dst"] = error_text(dist.gather, mine(r), [mine(r)] * n, 0) if r else None
    piece = tp.zeros(2, 3)
    dist.scatter(piece, [mine(j) for j in range(n)] if r == 0 else None, src=0)
    got["scatter"] = piece.numpy()
    mixed = tp.zeros(2, 3)
    dist.reduce_scatter(mixed, [mine(r * n + j) for j in range(n)])
    got["reduce_scatter"] = mixed.numpy()
    moved = [tp.zeros(2, 3) for _ in range(n)]
    dist.all_to_all(moved, [mine(r * n + j) for j in range(n)])
    got["all_to_all"] = np.stack([m.numpy() for m in moved])
    into = tp.zeros(2 * n, 3)
    dist.all_gather_into_tensor(into, mine(r))
    got["all_gather_into_tensor"] = into.numpy()
    a, b = mine(r), tp.tensor(np.arange(3, dtype=np.int32) * (r + 1))
    dist.all_reduce_coalesced([a, b])  # two dtypes
    got["coalesced/all_reduce"] = [a.numpy(), b.numpy()]
    rows = [[tp.zeros(2, 3), tp.zeros(3, dtype=tp.int32)] for _ in range(n)]
    dist.all_gather_coalesced(rows, [mine(r), tp.tensor(np.arange(3, dtype=np.int32) * (r + 1))])
    got["coalesced/all_gather"] = [[o.numpy() for o in row] for row in rows]
    sparse = tp.sparse_coo_tensor([[0, r + 1]], [1.0, 2.0 * (r + 1)], (n + 1,))
    dist.all_reduce(sparse)
    got["sparse/all_reduce"] = [sparse.to_dense().numpy(), sparse.is_coalesced()]
    got["sparse/max"] = error_text(dist.all_reduce, sparse, op="max")
    ints = np.array([r + 1, 2 * r + 3, 7 - r, 12], np.int32)
    for op in ("band", "bor", "bxor"):
        got[f"bitwise/{op}"] = np.asarray(dist.all_reduce(ints, op=op))
        got[f"bitwise/{op}/reduce_scatter"] = np.asarray(
            dist.reduce_scatter(np.stack([ints] * n), op=op)
        )
    got["bitwise/floats"] = error_text(dist.all_reduce, np.ones(2, np.float32), op="band")
    got["bitwise/complex_tensor"] = error_text(
        dist.all_reduce, tp.tensor([1 + 1j]), op=dist.ReduceOp.BAND
    )
    with profiler.profile(record_shapes=True) as prof:
        dist.all_reduce(mine(r))
    got["profile"] = [(e.name, e.is_async, e.input_shapes) for e in prof.function_events]
    work = dist.all_reduce(mine(r), async_op=True)
    got["async/result_is_the_tensor"] = [type(x).__name__ for x in work.result()]
    got["all_gather/short_list"] = error_text(dist.all_gather, [tp.zeros(2, 3)], mine(r))
    buf = tp.zeros(4, 2)
    acts = [tp_profiler.ProfilerActivity.CPU]
    with tp_profiler.profile(activities=acts, record_shapes=True) as p2p:
        q = dist.irecv(buf, src=(r - 1) % n)
        dist.isend(tp.tensor(payload(r)), dst=(r + 1) % n)
        q.wait()
    got["irecv"] = buf.numpy()
    got["profile/p2p"] = sorted(
        (e.name, e.is_async, e.input_shapes) for e in p2p.events() if ":" in e.name
    )
    got["recv/sender"] = None
    if r in (0, 1):
        pair = tp.zeros(4, 2)
        if r == 0:
            dist.send(tp.tensor(payload(7)), dst=1)
        else:
            got["recv/sender"] = dist.recv(pair, src=0)
            got["recv"] = pair.numpy()
    return got


def _p2p(r: int, n: int) -> dict[str, object]:
    got: dict[str, object] = {}
    nxt, prv = (r + 1) % n, (r - 1) % n
    pay = payload(r)
    zeros = np.zeros((4, 2), np.float32)

    # Everyone sends first, then receives (a ring): tensorplay code's usual shape.
    s = dist.isend(jnp.asarray(pay), dst=nxt)
    q = dist.irecv(zeros, src=prv)
    got["ring/are_work"] = [isinstance(s, dist.Work), isinstance(q, dist.Work)]
    got["ring/send"] = [s.wait(), s.result()]
    got["ring/recv_completed"] = q.is_completed()
    got["ring/recv"] = np.asarray(q.result())

    # Both directions with each neighbour in one batch, listed receives first.
    ops = [
        dist.P2POp(dist.irecv, zeros, prv),
        dist.P2POp(dist.irecv, zeros + 0, nxt),
        dist.P2POp(dist.isend, pay * 2, nxt),
        dist.P2POp(dist.isend, pay * 3, prv),
    ]
    works = dist.batch_isend_irecv(ops)
    got["batch/count"] = len(works)
    for w in works:
        w.wait()
    got["batch/from_prev"] = np.asarray(works[0].result())
    got["batch/from_next"] = np.asarray(works[1].result())

    # Several queued to one peer stay in order; futures drive the queue too.
    partner = r ^ 1 if (r ^ 1) < n else r
    if partner != r:
        sends = [dist.isend(pay + i, dst=partner) for i in range(3)]
        recvs = [dist.irecv(zeros, src=partner) for _ in range(3)]
        f = recvs[2].get_future().then(lambda fut: np.asarray(fut.value()).sum())
        got["queued/future_sum"] = float(f.wait())
        got["queued/recvs"] = [np.asarray(w.result()) for w in recvs]
        got["queued/sends_completed"] = all(w.is_completed() for w in sends)

    # A queued isend runs before the next collective, which the receiver reaches after recv.
    if r % 2 == 0 and r + 1 < n:
        w = dist.isend(pay, dst=r + 1)
        got["before_collective/all_reduce"] = np.asarray(dist.all_reduce(np.ones(2, np.float32)))
        got["before_collective/isend_completed"] = w.is_completed()
    elif r % 2 == 1:
        got["before_collective/recv"] = np.asarray(dist.recv(zeros, src=r - 1))
        got["before_collective/all_reduce"] = np.asarray(dist.all_reduce(np.ones(2, np.float32)))
    else:
        got["before_collective/all_reduce"] = np.asarray(dist.all_reduce(np.ones(2, np.float32)))

    # send/recv with async_op, and group-relative peers.
    sub = dist.new_group([0, n - 1])
    if r == 0:
        dist.send(pay, dst=n - 1, async_op=True).wait()
        got["group_relative/recv"] = np.asarray(dist.recv(zeros, group=sub, group_src=1))
    elif r == n - 1:
        got["group_relative/recv"] = np.asarray(dist.recv(zeros, src=0, async_op=True).result())
        dist.send(pay, group=sub, group_dst=0)

    got["errors/irecv_no_src"] = error_text(dist.irecv, zeros)
    got["errors/isend_to_self"] = error_text(dist.isend, zeros, r)
    got["errors/p2pop_send"] = error_text(dist.P2POp, dist.send, zeros, nxt)
    got["errors/batch_empty"] = error_text(dist.batch_isend_irecv, [])
    got["errors/batch_not_ops"] = error_text(dist.batch_isend_irecv, [zeros])
    got["pending_after"] = len(pg.world().pending)
    dist.barrier()
    return got


class Point:
    """A user class that travels by pickle and compares by value."""

    def __init__(self, x: int) -> None:
        self.x = x

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Point) and other.x == self.x


def obj(k: int) -> dict:
    """Rank ``k``'s object: sizes differ per rank."""
    return {"rank": k, "items": list(range(3 * k)), "text": "x" * (50 * k), "p": Point(k)}


def _objects(r: int, n: int) -> dict[str, object]:
    got: dict[str, object] = {}
    out = [None] * n
    got["all_gather/returns"] = dist.all_gather_object(out, obj(r))
    got["all_gather/objects"] = out
    fns = [None] * n
    dist.all_gather_object(fns, lambda v, k=r: v * 10 + k)  # cloudpickle: lambdas travel
    got["all_gather/lambdas_at_1"] = [f(1) for f in fns]

    for src in range(n):
        lst = [obj(src), ("t", src), None] if r == src else [None] * 3
        dist.broadcast_object_list(lst, src=src)
        got[f"broadcast/src{src}"] = lst
        gathered = [None] * n if r == src else None
        dist.gather_object(obj(r), gathered, dst=src)
        got[f"gather/dst{src}"] = gathered
        items = [(src, j, "y" * (7 * j)) for j in range(n)]
        box = [None]
        dist.scatter_object_list(box, items if r == src else None, src=src)
        got[f"scatter/src{src}"] = box

    pair = dist.new_group([n - 1, 0])
    if r in (0, n - 1):
        lst = [("from", n - 1), n - 1] if r == n - 1 else [None, None]
        dist.broadcast_object_list(lst, group=pair, group_src=1)
        got["broadcast/group_src"] = lst

    # send/recv_object_list around the ring; even ranks send first.
    nxt, prv = (r + 1) % n, (r - 1) % n
    mine = [obj(r), {"to": nxt}]
    box = [None, None]
    if r % 2 == 0:
        dist.send_object_list(mine, dst=nxt)
        got["ring/sender"] = dist.recv_object_list(box, src=prv)
    else:
        got["ring/sender"] = dist.recv_object_list(box, src=prv)
        dist.send_object_list(mine, dst=nxt)
    got["ring/objects"] = box
    got["errors/short_list"] = error_text(dist.all_gather_object, [None] * (n - 1), 1)
    dist.barrier()
    return got


def _subgroups(r: int, n: int) -> dict[str, object]:
    got: dict[str, object] = {}
    mine, groups = dist.new_subgroups(2)
    got["pairs/ranks"] = [g.ranks for g in groups]
    got["pairs/mine_is_mine"] = mine is groups[r // 2]
    got["pairs/rank"] = dist.get_rank(mine)
    got["pairs/all_reduce"] = np.asarray(dist.all_reduce(np.float32(r + 1), group=mine))
    mine, groups = dist.new_subgroups()  # default: the ranks on this host (all of them)
    got["host/ranks"] = [g.ranks for g in groups]
    got["host/mine"] = mine.ranks
    if n == 4:
        sub = dist.new_group([1, 2, 3, 0])
        mine, groups = dist.new_subgroups(1, group=sub)
        got["singles/ranks"] = [g.ranks for g in groups]
        got["singles/mine"] = mine.ranks
        got["errors/not_divisible"] = error_text(dist.new_subgroups, 3)
    got["errors/zero"] = error_text(dist.new_subgroups, 0)
    # Subgroups by enumeration: the even ranks and the odd ones.
    lists = [list(range(0, n, 2)), list(range(1, n, 2))]
    mine, groups = dist.new_subgroups_by_enumeration(lists)
    got["enumerated/ranks"] = [g.ranks for g in groups]
    got["enumerated/mine"] = mine.ranks
    got["enumerated/all_reduce"] = np.asarray(dist.all_reduce(np.float32(r + 1), group=mine))
    got["errors/overlap"] = error_text(dist.new_subgroups_by_enumeration, [[0, 1], [1]])
    got["errors/out_of_range"] = error_text(dist.new_subgroups_by_enumeration, [[0, n]])
    got["errors/empty"] = error_text(dist.new_subgroups_by_enumeration, [])
    return got


def _monitored(r: int, n: int) -> dict[str, object]:
    got: dict[str, object] = {
        "all_come": [
            dist.monitored_barrier(timeout=30),
            dist.monitored_barrier(wait_all_ranks=True),
        ]
    }
    # The upper half of the ranks never come: rank 0 names them, and so does every rank
    # that came. Without wait_all_ranks only the first missing rank is named.
    if r < n // 2:
        got["first_missing"] = error_text(dist.monitored_barrier, None, 2)
        got["every_missing"] = error_text(dist.monitored_barrier, None, 2, True)
    dist.barrier()
    # A timeout of zero runs out before rank 0 waits for anyone (c10d's group method).
    if r == 0:
        got["zero_timeout"] = error_text(dist.new_group(list(range(n))).monitored_barrier, 0)
    else:
        dist.new_group(list(range(n)))
    dist.barrier()
    return got
