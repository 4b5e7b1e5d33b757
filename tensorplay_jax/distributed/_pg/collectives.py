"""Blocking collectives on arrays across the processes of a group; each returns its result.

tensorplay's ``dist.all_reduce(t)`` fills ``t`` in place; JAX arrays are immutable, so
here every collective *returns* the result (a ``jax.Array`` on this process's device)
and leaves the input alone. Shapes follow the rule table in the
``tensorplay_jax.collectives`` docstring, with N the group size:
``all_gather``/``gather`` stack to ``(N, ...)``; ``scatter``/``reduce_scatter`` take
``(N, ...)``; ``reduce``/``gather`` give zeros on ranks other than ``dst``. Ranks
(``src``, ``dst``) are global ranks, as in tensorplay. Arguments are validated here,
before anything is exchanged, and the group's engine (``engine.Engine``) runs the
call; what needs every rank's view (shapes, dtypes, roots)
is compared across ranks and raises on every rank together.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from tensorplay_jax.collectives.reduce_op import ReduceOp, check_op_dtype, normalize_op
from tensorplay_jax.distributed._pg import descriptor
from tensorplay_jax.distributed._pg.group import ProcessGroup, pair_engine, resolve, world
from tensorplay_jax.runtime.settings import PG_MAX_NDIM

__all__ = [
    "all_gather",
    "all_reduce",
    "all_to_all",
    "all_to_all_single",
    "broadcast",
    "gather",
    "recv",
    "reduce",
    "reduce_scatter",
    "scatter",
    "send",
]


# ------------------------------------------------------------------ validation
def _array(fn: str, tensor: Any, arg: str = "tensor") -> Any:
    """``tensor`` as a jax.Array or numpy array (anything else is converted by numpy)."""
    if hasattr(tensor, "__jax_array__") and not isinstance(tensor, jax.Array):
        tensor = tensor.__jax_array__()
    if not isinstance(tensor, jax.Array | np.ndarray):
        try:
            tensor = np.asarray(tensor)
        except Exception as e:
            raise TypeError(f"{fn}: {arg} must be an array, got {type(tensor).__name__}") from e
    if tensor.ndim > PG_MAX_NDIM:
        raise ValueError(
            f"{fn}: {arg} has {tensor.ndim} dims; at most {PG_MAX_NDIM} are supported."
        )
    return tensor


def _reduce_op(fn: str, op: Any, x: Any) -> ReduceOp:
    """``op`` normalised, after checking that it is defined for ``x``'s dtype."""
    op = normalize_op(fn, op)
    check_op_dtype(fn, op, x.dtype)
    return op


def _root(fn: str, arg: str, value: Any, g: ProcessGroup) -> int:
    """The group index of global rank ``value`` (``src``/``dst``), or a ValueError."""
    size = world().world_size
    if not isinstance(value, int | np.integer) or isinstance(value, bool):
        raise TypeError(f"{fn}: {arg}={value!r} must be an int rank.")
    if not 0 <= value < size:
        raise ValueError(
            f"{fn}: {arg}={value} is out of range; valid ranks are 0..{size - 1} "
            f"(world size {size})."
        )
    if value not in g.ranks:
        raise ValueError(f"{fn}: {arg}={value} is not a member of the group {list(g.ranks)}.")
    return g.ranks.index(int(value))


def _stacked(fn: str, x: Any, n: int) -> None:
    if x.ndim == 0 or x.shape[0] != n:
        raise ValueError(
            f"{fn}: tensor must have a leading axis of the group size {n} (one slice per "
            f"rank), got shape {tuple(x.shape)}."
        )


def _desc(fn: str, g: ProcessGroup, x: Any, **kw) -> np.ndarray:
    code = descriptor.dtype_code(fn, np.dtype(x.dtype))
    return descriptor.encode(g.size(), fn, code, tuple(x.shape), **kw)


# ----------------------------------------------------------------- collectives
def all_reduce(tensor: Any, op: ReduceOp | str = ReduceOp.SUM, group: ProcessGroup | None = None):
    """Reduce ``tensor`` across the group; every rank gets the result.

    Args:
      tensor: this rank's array; same shape and dtype on every rank.
      op: a :class:`ReduceOp` (or its name): sum, avg, max, min, prod.
      group: a group from :func:`new_group` (default: all processes).

    Returns:
      The reduction, a jax.Array of ``tensor``'s shape and dtype.

    Raises:
      ValueError: shapes, dtypes or ops differ across ranks, or not a member.
      TimeoutError: a rank did not join within the group's timeout.

    Example:
      >>> y = dist.all_reduce(jnp.full((4,), dist.get_rank() + 1.0))  # doctest: +SKIP
    """
    fn = "all_reduce"
    g = resolve(fn, group)
    x = _array(fn, tensor)
    op = _reduce_op(fn, op, x)
    d = _desc(fn, g, x, reduce_op=op)
    return g.engine.all_reduce(x, op, d)


def broadcast(tensor: Any, src: int, group: ProcessGroup | None = None):
    """Every rank gets ``src``'s ``tensor`` (others pass an array of the same shape).

    Example:
      >>> y = dist.broadcast(x, src=0)  # doctest: +SKIP
    """
    fn = "broadcast"
    g = resolve(fn, group)
    x = _array(fn, tensor)
    s = _root(fn, "src", src, g)
    d = _desc(fn, g, x, root=s)
    return g.engine.broadcast(x, s, d)


def reduce(
    tensor: Any, dst: int, op: ReduceOp | str = ReduceOp.SUM, group: ProcessGroup | None = None
):
    """``dst`` gets the reduction of every rank's ``tensor``; the other ranks get zeros.

    Example:
      >>> y = dist.reduce(x, dst=0, op=dist.ReduceOp.MAX)  # doctest: +SKIP
    """
    fn = "reduce"
    g = resolve(fn, group)
    x = _array(fn, tensor)
    r = _root(fn, "dst", dst, g)
    op = _reduce_op(fn, op, x)
    d = _desc(fn, g, x, root=r, reduce_op=op)
    return g.engine.reduce(x, r, op, d)


def all_gather(tensor: Any, group: ProcessGroup | None = None):
    """Every rank gets every rank's ``tensor``, stacked: shape ``(N, *tensor.shape)``.

    Example:
      >>> ys = dist.all_gather(x)  # ys[j] is rank j's x  # doctest: +SKIP
    """
    fn = "all_gather"
    g = resolve(fn, group)
    x = _array(fn, tensor)
    d = _desc(fn, g, x)
    return g.engine.all_gather(x, d)


def gather(tensor: Any, dst: int = 0, group: ProcessGroup | None = None):
    """``dst`` gets every rank's ``tensor`` stacked to ``(N, ...)``; other ranks get zeros.

    Example:
      >>> ys = dist.gather(x, dst=0)  # doctest: +SKIP
    """
    fn = "gather"
    g = resolve(fn, group)
    x = _array(fn, tensor)
    r = _root(fn, "dst", dst, g)
    d = _desc(fn, g, x, root=r)
    return g.engine.gather(x, r, d)


def scatter(tensor: Any, src: int = 0, group: ProcessGroup | None = None):
    """Rank i gets slice i of ``src``'s ``tensor`` of shape ``(N, ...)``.

    Every rank passes an array of that shape (only ``src``'s values are read).

    Example:
      >>> mine = dist.scatter(xs, src=0)  # doctest: +SKIP
    """
    fn = "scatter"
    g = resolve(fn, group)
    x = _array(fn, tensor)
    _stacked(fn, x, g.size())
    r = _root(fn, "src", src, g)
    d = _desc(fn, g, x, root=r)
    return g.engine.scatter(x, r, d)


def reduce_scatter(
    tensor: Any, op: ReduceOp | str = ReduceOp.SUM, group: ProcessGroup | None = None
):
    """Rank i gets slice i of the reduction of every rank's ``(N, ...)`` ``tensor``.

    Example:
      >>> mine = dist.reduce_scatter(xs)  # doctest: +SKIP
    """
    fn = "reduce_scatter"
    g = resolve(fn, group)
    x = _array(fn, tensor)
    _stacked(fn, x, g.size())
    op = _reduce_op(fn, op, x)
    d = _desc(fn, g, x, reduce_op=op)
    return g.engine.reduce_scatter(x, op, d)


def all_to_all(tensor: Any, group: ProcessGroup | None = None):
    """Slice j of each rank's ``(N, ...)`` ``tensor`` goes to rank j: ``y_i[j] = x_j[i]``.

    Example:
      >>> ys = dist.all_to_all(xs)  # doctest: +SKIP
    """
    fn = "all_to_all"
    g = resolve(fn, group)
    x = _array(fn, tensor)
    _stacked(fn, x, g.size())
    d = _desc(fn, g, x)
    return g.engine.all_to_all(x, d)


def _splits(fn: str, arg: str, sizes: Any, total: int, n: int) -> tuple[int, ...]:
    if sizes is None:
        if total % n:
            raise ValueError(
                f"{fn}: tensor has {total} rows, not divisible by the group size {n}; pass {arg}."
            )
        return (total // n,) * n
    sizes = tuple(int(s) for s in sizes)
    if len(sizes) != n or any(s < 0 for s in sizes):
        raise ValueError(f"{fn}: {arg}={list(sizes)} must be {n} non-negative sizes.")
    return sizes


def all_to_all_single(
    tensor: Any,
    output_split_sizes: list[int] | None = None,
    input_split_sizes: list[int] | None = None,
    group: ProcessGroup | None = None,
):
    """Rows of ``tensor`` split by ``input_split_sizes`` go to ranks 0..N-1; received pieces
    are concatenated in rank order.

    Args:
      tensor: ``(M, ...)``; the trailing shape is the same on every rank.
      output_split_sizes: rows this rank receives from each rank (default: ``M / N`` each).
      input_split_sizes: rows this rank sends to each rank (default: ``M / N`` each).
      group: the group (default: all processes).

    Returns:
      ``(sum(output_split_sizes), ...)``.

    Example:
      >>> y = dist.all_to_all_single(x, [1, 3], [2, 2])  # doctest: +SKIP
    """
    fn = "all_to_all_single"
    g = resolve(fn, group)
    x = _array(fn, tensor)
    n = g.size()
    if x.ndim == 0:
        raise ValueError(f"{fn}: tensor must have at least one dimension, got a scalar.")
    ins = _splits(fn, "input_split_sizes", input_split_sizes, x.shape[0], n)
    if sum(ins) != x.shape[0]:
        raise ValueError(
            f"{fn}: input_split_sizes={list(ins)} sum to {sum(ins)}, but tensor has "
            f"{x.shape[0]} rows."
        )
    outs = _splits(fn, "output_split_sizes", output_split_sizes, x.shape[0], n)
    d = _desc(fn, g, x, in_splits=ins, out_splits=outs)
    return g.engine.all_to_all_single(x, d)


def _p2p(fn: str, tensor: Any, peer_arg: str, peer: Any, group: ProcessGroup | None):
    g = resolve(fn, group)
    _root(fn, peer_arg, peer, g)
    me = world().rank
    if peer == me:
        raise ValueError(f"{fn}: {peer_arg}={peer} is this process's own rank.")
    return g, _array(fn, tensor), me


def send(tensor: Any, dst: int, group: ProcessGroup | None = None) -> None:
    """Send ``tensor`` to rank ``dst``, which must call :func:`recv` with ``src`` = this rank.

    Blocks until ``dst`` has the data (as gloo's send does once matched).

    Example:
      >>> dist.send(x, dst=1)  # doctest: +SKIP
    """
    fn = "send"
    _, x, me = _p2p(fn, tensor, "dst", dst, group)
    eng = pair_engine(me, int(dst))
    s, r = eng.ranks.index(me), eng.ranks.index(int(dst))
    d = _desc("send/recv", _pair_group(eng), x, root=s)
    eng.send_recv(fn, x, s, r, d)


def recv(tensor: Any, src: int, group: ProcessGroup | None = None):
    """Receive from rank ``src``; ``tensor`` gives the expected shape and dtype.

    Returns:
      The received array (``tensor`` itself is not modified).

    Example:
      >>> y = dist.recv(jnp.zeros(4), src=0)  # doctest: +SKIP
    """
    fn = "recv"
    _, x, me = _p2p(fn, tensor, "src", src, group)
    eng = pair_engine(me, int(src))
    s, r = eng.ranks.index(int(src)), eng.ranks.index(me)
    d = _desc("send/recv", _pair_group(eng), x, root=s)
    return eng.send_recv(fn, x, s, r, d)


def _pair_group(eng: Any) -> ProcessGroup:
    return ProcessGroup(eng.ranks, -1, eng)
