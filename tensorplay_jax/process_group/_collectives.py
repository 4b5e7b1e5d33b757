"""Blocking collectives on arrays across the processes of a group; each returns its result.

tensorplay's ``dist.all_reduce(t)`` fills ``t`` in place; JAX arrays are immutable, so
here every collective *returns* the result (a ``jax.Array`` on this process's device)
and leaves the input alone. Shapes follow the rule table
(``tensorplay_jax.collectives.rules``), with N the group size:
``all_gather``/``gather`` stack to ``(N, ...)``; ``scatter``/``reduce_scatter`` take
``(N, ...)``; ``reduce``/``gather`` give zeros on ranks other than ``dst``. Ranks
(``src``, ``dst``) are global ranks, as in tensorplay. Arguments are validated here,
before anything is exchanged, and the group's engine (``engine.Engine``) runs the
call; what needs every rank's view (shapes, dtypes, roots)
is compared across ranks and raises on every rank together.

``async_op=True`` (every collective takes it) runs the call at once, in issue order,
and returns a completed ``_work.Work`` whose ``result()`` is what the blocking call
returns. On a process outside the group a call warns and does nothing (returns
None), as tensorplay's (``_group.members_only``). Point-to-point calls live in
``_p2p``. ``tensorplay_jax.distributed`` wraps these functions in tensorplay's
in-place forms.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import jax
import numpy as np

from tensorplay_jax.collectives.reduce_op import ReduceOp, check_op_dtype, normalize_op
from tensorplay_jax.process_group import _descriptor
from tensorplay_jax.process_group._group import ProcessGroup, members_only, resolve, world
from tensorplay_jax.process_group._work import Work
from tensorplay_jax.runtime import trace
from tensorplay_jax.runtime.settings import PG_MAX_NDIM

__all__ = [
    "all_gather",
    "all_reduce",
    "all_to_all",
    "all_to_all_single",
    "broadcast",
    "gather",
    "all_gather_into_tensor",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "scatter",
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
    code = _descriptor.dtype_code(fn, np.dtype(x.dtype))
    return _descriptor.encode(g.size(), fn, code, tuple(x.shape), **kw)


def _done(result: Any, async_op: bool) -> Any:
    """The blocking call's return: ``result``, or with ``async_op`` a completed Work of it."""
    return Work.completed(result) if async_op else result


def _call(fn: str, method: Callable[..., Any], x: Any, *args: Any) -> Any:
    """The engine's ``method(x, *args)``; while profiling, in a span named after ``fn``.

    The engines mark the part spent meeting the other ranks as a nested ``wait`` span
    (descriptor exchange); the rest of the span is the transfer and the reduction.
    """
    if not trace.RECORDING:
        return method(x, *args)
    span = trace.begin(f"pg.{fn}", "pg")
    try:
        return method(x, *args)
    finally:
        shapes = getattr(_recording, "shapes", None)
        extra = {"shapes": shapes} if shapes is not None else {}
        span.end(
            bytes=int(x.nbytes),
            shape=list(x.shape),
            dtype=str(x.dtype),
            backend=world().backend,
            **extra,
        )


_recording = threading.local()  # .shapes: what the caller's tensors were (recorded_shapes)


@contextlib.contextmanager
def recorded_shapes(shapes: list[list[int]]) -> Iterator[None]:
    """While profiling, the collectives called in the block record ``shapes`` as their
    inputs: a call that moves several tensors as one array (the coalesced collectives)
    shows the tensors it was given.

    Example:
      >>> with recorded_shapes([[2], [3, 3]]):
      ...     pass
    """
    _recording.shapes = shapes
    try:
        yield
    finally:
        _recording.shapes = None


# ----------------------------------------------------------------- collectives
@members_only
def all_reduce(
    tensor: Any,
    op: ReduceOp | str = ReduceOp.SUM,
    group: ProcessGroup | None = None,
    async_op: bool = False,
):
    """Reduce ``tensor`` across the group; every rank gets the result.

    Args:
      tensor: this rank's array; same shape and dtype on every rank.
      op: a :class:`ReduceOp` (or its name): sum, avg, max, min, prod; band, bor,
        bxor for integer and bool arrays.
      group: a group from :func:`new_group` (default: all processes).

    Returns:
      The reduction, a jax.Array of ``tensor``'s shape and dtype; None (with a warning)
      on a process that is not a member of ``group``, as tensorplay's.

    Raises:
      ValueError: shapes, dtypes or ops differ across ranks.
      TimeoutError: a rank did not join within the group's timeout.

    Example:
      >>> y = dist.all_reduce(jnp.full((4,), dist.get_rank() + 1.0))  # doctest: +SKIP
    """
    fn = "all_reduce"
    g = resolve(fn, group)
    x = _array(fn, tensor)
    op = _reduce_op(fn, op, x)
    d = _desc(fn, g, x, reduce_op=op)
    return _done(_call(fn, g.engine.all_reduce, x, op, d), async_op)


@members_only
def broadcast(tensor: Any, src: int, group: ProcessGroup | None = None, async_op: bool = False):
    """Every rank gets ``src``'s ``tensor`` (others pass an array of the same shape).

    Example:
      >>> y = dist.broadcast(x, src=0)  # doctest: +SKIP
    """
    fn = "broadcast"
    g = resolve(fn, group)
    x = _array(fn, tensor)
    s = _root(fn, "src", src, g)
    d = _desc(fn, g, x, root=s)
    return _done(_call(fn, g.engine.broadcast, x, s, d), async_op)


@members_only
def reduce(
    tensor: Any,
    dst: int,
    op: ReduceOp | str = ReduceOp.SUM,
    group: ProcessGroup | None = None,
    async_op: bool = False,
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
    return _done(_call(fn, g.engine.reduce, x, r, op, d), async_op)


@members_only
def all_gather(tensor: Any, group: ProcessGroup | None = None, async_op: bool = False):
    """Every rank gets every rank's ``tensor``, stacked: shape ``(N, *tensor.shape)``.

    Example:
      >>> ys = dist.all_gather(x)  # ys[j] is rank j's x  # doctest: +SKIP
    """
    fn = "all_gather"
    g = resolve(fn, group)
    x = _array(fn, tensor)
    d = _desc(fn, g, x)
    return _done(_call(fn, g.engine.all_gather, x, d), async_op)


@members_only
def gather(tensor: Any, dst: int = 0, group: ProcessGroup | None = None, async_op: bool = False):
    """``dst`` gets every rank's ``tensor`` stacked to ``(N, ...)``; other ranks get zeros.

    Example:
      >>> ys = dist.gather(x, dst=0)  # doctest: +SKIP
    """
    fn = "gather"
    g = resolve(fn, group)
    x = _array(fn, tensor)
    r = _root(fn, "dst", dst, g)
    d = _desc(fn, g, x, root=r)
    return _done(_call(fn, g.engine.gather, x, r, d), async_op)


@members_only
def scatter(tensor: Any, src: int = 0, group: ProcessGroup | None = None, async_op: bool = False):
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
    return _done(_call(fn, g.engine.scatter, x, r, d), async_op)


@members_only
def reduce_scatter(
    tensor: Any,
    op: ReduceOp | str = ReduceOp.SUM,
    group: ProcessGroup | None = None,
    async_op: bool = False,
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
    return _done(_call(fn, g.engine.reduce_scatter, x, op, d), async_op)


@members_only
def all_to_all(tensor: Any, group: ProcessGroup | None = None, async_op: bool = False):
    """Slice j of each rank's ``(N, ...)`` ``tensor`` goes to rank j: ``y_i[j] = x_j[i]``.

    Example:
      >>> ys = dist.all_to_all(xs)  # doctest: +SKIP
    """
    fn = "all_to_all"
    g = resolve(fn, group)
    x = _array(fn, tensor)
    _stacked(fn, x, g.size())
    d = _desc(fn, g, x)
    return _done(_call(fn, g.engine.all_to_all, x, d), async_op)


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


@members_only
def all_to_all_single(
    tensor: Any,
    output_split_sizes: list[int] | None = None,
    input_split_sizes: list[int] | None = None,
    group: ProcessGroup | None = None,
    async_op: bool = False,
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
    return _done(_call(fn, g.engine.all_to_all_single, x, d), async_op)


def _check_dtype(fn: str, out: Any, x: Any) -> None:
    if np.dtype(out.dtype) != np.dtype(x.dtype):
        raise TypeError(
            f"{fn}: output dtype {np.dtype(out.dtype)} differs from the input's "
            f"{np.dtype(x.dtype)}; pass arrays of one dtype."
        )


@members_only
def all_gather_into_tensor(
    output_tensor: Any,
    input_tensor: Any,
    group: ProcessGroup | None = None,
    async_op: bool = False,
):
    """Every rank's ``input_tensor``, concatenated (or stacked) into ``output_tensor``'s shape.

    Args:
      output_tensor: gives the result's shape and dtype (it is not modified):
        ``(N * k, ...)`` for the concatenation of inputs of shape ``(k, ...)``, or
        ``(N, k, ...)`` for them stacked.
      input_tensor: this rank's array.
      group: the group (default: all processes).
      async_op: return a completed ``Work`` whose ``result()`` is the array.

    Returns:
      The gathered array, of ``output_tensor``'s shape.

    Example:
      >>> y = dist.all_gather_into_tensor(jnp.zeros(2 * n), jnp.ones(2))  # doctest: +SKIP
    """
    fn = "all_gather_into_tensor"
    g = resolve(fn, group)
    x = _array(fn, input_tensor, "input_tensor")
    out = _array(fn, output_tensor, "output_tensor")
    n = g.size()
    stacked, concat = (n, *x.shape), (n * x.shape[0], *x.shape[1:]) if x.ndim else (n,)
    if tuple(out.shape) not in (stacked, concat):
        raise ValueError(
            f"{fn}: output_tensor has shape {tuple(out.shape)}; for an input of shape "
            f"{tuple(x.shape)} and a group of {n} it must be {concat} (concatenated) "
            f"or {stacked} (stacked)."
        )
    _check_dtype(fn, out, x)
    x = x.reshape(1) if x.ndim == 0 else x  # gathered as (N, 1): the same bytes as (N,)
    y = _call(fn, g.engine.all_gather, x, _desc("all_gather", g, x))
    return _done(y.reshape(out.shape), async_op)


@members_only
def reduce_scatter_tensor(
    output: Any,
    input: Any,  # tensorplay's name
    op: ReduceOp | str = ReduceOp.SUM,
    group: ProcessGroup | None = None,
    async_op: bool = False,
):
    """Rank i gets block i of the reduction of every rank's ``input``.

    Args:
      output: gives the result's shape ``(k, ...)`` and dtype (it is not modified).
      input: ``(N * k, ...)`` (blocks of ``k`` rows, block i for rank i) or
        ``(N, k, ...)``.
      op: a :class:`ReduceOp` (or its name).
      group: the group (default: all processes).
      async_op: return a completed ``Work`` whose ``result()`` is the array.

    Returns:
      This rank's block of the reduction, of ``output``'s shape.

    Example:
      >>> y = dist.reduce_scatter_tensor(jnp.zeros(2), jnp.ones(2 * n))  # doctest: +SKIP
    """
    fn = "reduce_scatter_tensor"
    g = resolve(fn, group)
    x = _array(fn, input, "input")
    out = _array(fn, output, "output")
    n = g.size()
    stacked = (n, *out.shape)
    concat = (n * out.shape[0], *out.shape[1:]) if out.ndim else (n,)
    if tuple(x.shape) not in (stacked, concat):
        raise ValueError(
            f"{fn}: input has shape {tuple(x.shape)}; for an output of shape "
            f"{tuple(out.shape)} and a group of {n} it must be {concat} or {stacked}."
        )
    _check_dtype(fn, out, x)
    x = x.reshape(stacked)
    op = _reduce_op(fn, op, x)
    y = _call(
        fn,
        g.engine.reduce_scatter,
        x,
        op,
        _desc("reduce_scatter", g, x, reduce_op=op),
    )
    return _done(y, async_op)
