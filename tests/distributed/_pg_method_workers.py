"""Worker code for the tests of c10d's methods of a group object (``pg.allreduce([t])``, ...).

Three ranks; most calls run on the group of global ranks 1 and 2, whose group ranks (0
and 1) differ from their global ranks, so a rank given to a method is read as a group
rank or the values show it. Each rank hands back what each call wrote or raised
(``tests._worker.hand_back``), keyed by case; the tests compare with numpy computed
from the inputs (:func:`mine`) and with what torch's gloo wrote for the same calls.

The calls are written once for both libraries, as a port writes them: with
``TPJ_PG_ORACLE=torch`` they run on torch (``golden/make_pg_methods_golden.py``
stores its values), without the bad calls, whose errors are this package's words.
"""

from __future__ import annotations

import datetime
import os
import sys

import numpy as np

from tests._torch_golden import by_path
from tests._worker import error_text, hand_back

ORACLE = os.environ.get("TPJ_PG_ORACLE") == "torch"
if ORACLE:
    import torch as tp
    import torch.distributed as dist
else:
    import tensorplay_jax as tp
    import tensorplay_jax.distributed as dist


def mine(k: int, shape: tuple[int, ...] = (2, 3)) -> np.ndarray:
    """Global rank ``k``'s input."""
    return (np.arange(np.prod(shape)).reshape(shape) % 5 * (k + 1) + k).astype(np.float32)


def _t(k: int, shape: tuple[int, ...] = (2, 3)) -> tp.Tensor:
    return tp.tensor(mine(k, shape))


def methods() -> None:
    if ORACLE:
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    else:
        dist.init_process_group("gloo", timeout=60, engine=sys.argv[1])
    r = dist.get_rank()
    sub = dist.new_group([1, 2])
    got: dict[str, object] = {"pg_count": dist.get_pg_count(), "world": _world(r)}
    if r in (1, 2):
        got["sub"], got["kept"] = _sub(r, sub)
    if not ORACLE:
        got["errors"] = _errors(r, sub)
    t = _t(r)  # the next call on the world works after every refusal above
    dist.group.WORLD.allreduce([t]).wait()
    got["after_errors"] = t.numpy()
    dist.destroy_process_group()
    got["pg_count/destroyed"] = dist.get_pg_count()
    hand_back(got)


def _world(r: int) -> dict[str, object]:
    pg = dist.group.WORLD
    got: dict[str, object] = {"name": pg.name(), "group_name": pg.group_name}
    t = _t(r)
    w = pg.allreduce([t])
    got["allreduce"] = t.numpy()
    got["allreduce/work"] = [w.wait(), w.is_completed(), w.result()[0] is t]
    t = _t(r)
    pg.allreduce(t, dist.ReduceOp.MAX).wait()
    got["allreduce/max"] = t.numpy()
    opts = dist.AllreduceOptions()
    opts.reduceOp = dist.ReduceOp.PRODUCT
    t = _t(r)
    pg.allreduce([t], opts).wait()
    got["allreduce/opts_prod"] = t.numpy()
    a, b = _t(r), _t(r + 3)
    pg.allreduce([a, b]).wait()
    got["allreduce/two"] = [a.numpy(), b.numpy()]
    a, b = _t(r), _t(r, (4,))
    pg.allreduce_coalesced([a, b]).wait()
    got["allreduce_coalesced"] = [a.numpy(), b.numpy()]
    got["barrier"] = [pg.barrier().wait(), pg.barrier(dist.BarrierOptions()).wait()]
    return got


def _sub(r: int, g: dist.ProcessGroup) -> tuple[dict[str, object], dict[str, object]]:
    """What the group's calls wrote, and what they left on ranks that are not the root."""
    me = g.rank()
    got: dict[str, object] = {"rank_size": [me, g.size()], "group_name": g.group_name}
    kept: dict[str, object] = {}
    t = _t(r)
    g.broadcast(t, 1).wait()  # group rank 1: global rank 2
    got["broadcast"] = t.numpy()
    opts = dist.BroadcastOptions()
    opts.rootRank, opts.rootTensor = 0, 1
    pair = [_t(r), _t(r + 3)]
    g.broadcast(pair, opts).wait()
    got["broadcast/root_tensor"] = [p.numpy() for p in pair]
    # A reduce writes the root's tensor; what another rank's holds afterwards is ours
    # ("kept": as it was), not torch's (its gloo leaves partial results there).
    t = _t(r)
    g.reduce(t, 0).wait()
    (got if me == 0 else kept)["reduce"] = t.numpy()
    opts = dist.ReduceOptions()
    opts.rootRank, opts.reduceOp = 1, dist.ReduceOp.MAX
    t = _t(r)
    g.reduce([t], opts).wait()
    (got if me == 1 else kept)["reduce/opts_max"] = t.numpy()
    outs = [tp.zeros(2, 3) for _ in range(2)]
    g.allgather([outs], [_t(r)]).wait()
    flat = [tp.zeros(2, 3) for _ in range(2)]
    g.allgather(flat, _t(r)).wait()
    got["allgather"] = [[o.numpy() for o in outs], [o.numpy() for o in flat]]
    whole = tp.zeros(4, 3)
    g._allgather_base(whole, _t(r)).wait()
    got["_allgather_base"] = whole.numpy()
    outs = [tp.zeros(2, 3) for _ in range(2)] if me == 1 else []
    g.gather(outs, _t(r), 1).wait()
    got["gather"] = [o.numpy() for o in outs]
    opts = dist.GatherOptions()
    outs = [[tp.zeros(2, 3) for _ in range(2)]] if me == 0 else []
    g.gather(outs, [_t(r)], opts).wait()
    got["gather/opts"] = [o.numpy() for o in outs[0]] if outs else []
    piece = tp.zeros(2, 3)
    g.scatter(piece, [_t(10), _t(20)] if me == 1 else [], 1).wait()
    got["scatter"] = piece.numpy()
    out = tp.zeros(2, 3)
    g.reduce_scatter(out, [_t(r), _t(r + 3)]).wait()
    out2 = tp.zeros(2, 3)
    opts = dist.ReduceScatterOptions()
    opts.reduceOp = dist.ReduceOp.MAX
    g.reduce_scatter([out2], [[_t(r), _t(r + 3)]], opts).wait()
    got["reduce_scatter"] = [out.numpy(), out2.numpy()]
    part = tp.zeros(2, 3)
    g._reduce_scatter_base(part, _t(r, (4, 3))).wait()
    got["_reduce_scatter_base"] = part.numpy()
    outs = [tp.zeros(2, 3) for _ in range(2)]
    g.alltoall(outs, [_t(r), _t(r + 3)]).wait()
    got["alltoall"] = [o.numpy() for o in outs]
    even = tp.zeros(4, 3)
    g.alltoall_base(even, _t(r, (4, 3)), [], []).wait()
    # uneven: group rank 0 sends 1 row to itself and 3 to rank 1; rank 1 sends 2 and 2
    sends = [1, 3] if me == 0 else [2, 2]
    receives = [1, 2] if me == 0 else [3, 2]
    uneven = tp.zeros(sum(receives), 3)
    g.alltoall_base(uneven, _t(r, (4, 3)), receives, sends).wait()
    got["alltoall_base"] = [even.numpy(), uneven.numpy()]
    if me == 0:
        got["send"] = g.send([_t(r)], 1, 7).wait()
    else:
        into = tp.zeros(2, 3)
        w = g.recv([into], 0, 7)
        w.wait()
        got["recv"] = [into.numpy(), w.source_rank()]
    return got, kept


def _errors(r: int, g: dist.ProcessGroup) -> dict[str, object]:
    """Bad calls, made alike on every rank (so none waits for another), in our words."""
    pg = dist.group.WORLD
    second = datetime.timedelta(seconds=1)
    got = {
        "timeout": error_text(pg.allreduce, [_t(r)], dist.ReduceOp.SUM, second),
        "array": error_text(pg.allreduce, [np.ones(2, np.float32)]),
        "two_shapes": error_text(pg.allreduce, [_t(r), _t(r, (4,))]),
        "empty": error_text(pg.allreduce, []),
        "source_rank": error_text(pg.barrier().source_rank),
        "other_options": error_text(pg.allreduce, [_t(r)], dist.BroadcastOptions()),
    }
    if r in (1, 2):
        got["root"] = error_text(g.broadcast, _t(r), 2)
        got["two_for_reduce"] = error_text(g.reduce, [_t(r), _t(r)], 0)
        got["gather_length"] = error_text(g.allgather, [tp.zeros(2, 3)], _t(r))
        got["send_rank"] = error_text(g.send, [_t(r)], 2, 0)
        got["op_twice"] = error_text(g.reduce, [_t(r)], dist.ReduceOptions(), "max")
    else:
        got["non_member"] = error_text(g.allreduce, [_t(r)])
    return got


def flat(results: list[dict]) -> dict[str, np.ndarray]:
    """Every rank's values by path (``"1/sub/allgather/0/1"``), not its errors nor what a
    reduce kept: what the golden file holds of torch's run, and what ours is compared with."""
    return by_path(results, skip=("errors", "kept"))
