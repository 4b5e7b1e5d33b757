"""tensorplay's forms of the process-group collectives: Tensors filled in place, outputs first.

``tensorplay_jax.process_group`` is JAX-shaped: a collective returns its result and
leaves its input alone (JAX arrays are immutable). tensorplay code passes Tensors and
reads them afterwards (``dist.all_reduce(t); print(t)``), and passes outputs first
(``dist.all_gather(tensor_list, t)``, ``dist.scatter(t, scatter_list, src)``,
``dist.reduce_scatter(out, input_list)``, ``dist.all_to_all(outs, ins)``). Each
function here takes tensorplay's signature and its JAX form alike:

- a tensorplay_jax ``Tensor`` where tensorplay writes (the tensor of ``all_reduce``,
  ``broadcast``, ``reduce`` on ``dst``, ``recv``/``irecv``; an output Tensor; the
  Tensors of an output list) receives the result in place, unrecorded, with its
  version bumped (``tensors.overwrite``), and the call returns what tensorplay's
  returns: None, a ``Work`` with ``async_op=True`` (its ``result()`` is the list of
  written Tensors), the sender's rank for ``recv``;
- an output list of arrays gets the results in its slots;
- with ``jax.Array`` or NumPy inputs in the JAX form the call is
  ``process_group``'s, returning the result;
- on a process outside ``group`` the call warns and does nothing, as tensorplay's.

Example (one process per rank):
  >>> import tensorplay_jax as tp
  >>> import tensorplay_jax.distributed as dist
  >>> t = tp.ones(3) * (dist.get_rank() + 1)  # doctest: +SKIP
  >>> dist.all_reduce(t)  # doctest: +SKIP
  >>> gathered = [tp.zeros(3) for _ in range(dist.get_world_size())]  # doctest: +SKIP
  >>> dist.all_gather(gathered, t)  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tensorplay_jax import process_group as pg
from tensorplay_jax.collectives.reduce_op import normalize_op, supports_complex
from tensorplay_jax.process_group import ProcessGroup, ReduceOp, Work
from tensorplay_jax.tensors import SparseTensor, Tensor, overwrite, sparse_coo_tensor

__all__ = [
    "all_gather",
    "all_gather_coalesced",
    "all_gather_into_tensor",
    "all_reduce",
    "all_reduce_coalesced",
    "all_to_all",
    "all_to_all_single",
    "batch_isend_irecv",
    "broadcast",
    "gather",
    "irecv",
    "recv",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "scatter",
]


def _array(x: Any) -> Any:
    return x.value if isinstance(x, Tensor) else x


def _fill(fn: str, t: Tensor, value: Any) -> None:
    """Write ``value`` into ``t`` as tensorplay's collectives do (shapes must agree)."""
    if tuple(t.shape) != tuple(value.shape):
        raise ValueError(
            f"{fn}: the output tensor has shape {tuple(t.shape)}, but the result has shape "
            f"{tuple(value.shape)}."
        )
    overwrite(t, jnp.asarray(value, dtype=t.dtype))


def _fill_slot(fn: str, outputs: list[Any], i: int, value: Any) -> None:
    """Slot ``i`` of ``outputs`` gets ``value``: a Tensor in place, anything else replaced."""
    if isinstance(outputs[i], Tensor):
        _fill(fn, outputs[i], value)
    else:
        outputs[i] = value


def _fill_list(fn: str, outputs: list[Any], values: Any) -> None:
    """Each slot of ``outputs`` gets its row of ``values``."""
    for i in range(len(outputs)):
        _fill_slot(fn, outputs, i, values[i])


def _list(fn: str, arg: str, items: Any, n: int) -> list[Any]:
    if not isinstance(items, list | tuple) or len(items) != n:
        size = len(items) if isinstance(items, list | tuple) else type(items).__name__
        raise ValueError(
            f"{fn}: {arg} must be a list of {n} tensors (one per rank of the group), got {size}."
        )
    return list(items)


def _stack(fn: str, arg: str, items: Sequence[Any]) -> Any:
    values = [jnp.asarray(_array(x)) for x in items]
    shapes = {tuple(v.shape) for v in values}
    if len(shapes) != 1:
        raise ValueError(f"{fn}: the tensors of {arg} must have one shape, got {sorted(shapes)}.")
    return jnp.stack(values)


def _written(async_op: bool, tensors: list[Any]) -> Work | None:
    """What tensorplay returns once the outputs are written: None, or a finished Work."""
    return Work.completed(tensors) if async_op else None


def _size(group: ProcessGroup | None) -> int:
    return pg.get_world_size(group)


def _member(fn: str, group: ProcessGroup | None) -> None:
    """Raise ``NotAMember`` on a process outside ``group``: the call then warns and does
    nothing (``members_only``), as tensorplay's."""
    if group is not None and pg.get_rank(group) < 0:
        raise pg.NotAMember(fn, pg.get_rank())


def _global(group: ProcessGroup | None, rank: int | None, group_rank: int | None) -> int | None:
    """A global rank from ``rank`` or ``group_rank`` (tensorplay's ``group_src``/``group_dst``)."""
    if group_rank is None:
        return rank
    if rank is not None:
        raise ValueError("pass either the global rank or the group rank, not both.")
    return pg.get_global_rank(group, group_rank)


def _sparse_sum(t: SparseTensor, op: Any, group: ProcessGroup | None) -> SparseTensor:
    """Every rank's sparse ``t`` summed, coalesced (tensorplay's sparse all_reduce, sum only):
    each rank's indices and values travel padded to the largest count."""
    if normalize_op("all_reduce", op) is not ReduceOp.SUM:
        raise ValueError(f"all_reduce: a sparse tensor can only be summed, got op={op!r}")
    idx = np.asarray(t._indices().value)
    vals = jnp.asarray(t._values().value)
    counts = np.asarray(pg.all_gather(np.array([idx.shape[1]], np.int64), group))[:, 0]
    most = int(counts.max())
    pad = most - idx.shape[1]
    idx = np.pad(idx, ((0, 0), (0, pad)))
    vals = jnp.pad(vals, ((0, pad),) + ((0, 0),) * (vals.ndim - 1))
    every_idx = np.asarray(pg.all_gather(idx, group))
    every_vals = pg.all_gather(vals, group)
    indices = np.concatenate([every_idx[r][:, :c] for r, c in enumerate(counts)], axis=1)
    values = jnp.concatenate([every_vals[r][:c] for r, c in enumerate(counts)])
    return sparse_coo_tensor(indices, values, tuple(t.shape)).coalesce()


@pg.members_only
def all_reduce(
    tensor: Any,
    op: ReduceOp | str = ReduceOp.SUM,
    group: ProcessGroup | None = None,
    async_op: bool = False,
) -> Any:
    """Reduce ``tensor`` across the group: a Tensor in place (returns None), an array
    returned."""
    if not isinstance(tensor, Tensor):
        return pg.all_reduce(tensor, op, group, async_op)
    _member("all_reduce", group)
    if isinstance(tensor, SparseTensor):
        tensor._write(_sparse_sum(tensor, op, group), "all_reduce")
        return _written(async_op, [tensor])
    _complex_op_check("all_reduce", [tensor], op)
    _fill("all_reduce", tensor, pg.all_reduce(tensor.value, op, group))
    return _written(async_op, [tensor])


def _complex_op_check(fn: str, tensors: Sequence[Any], op: Any) -> None:
    """tensorplay's refusal of an op with no meaning on complex numbers (max, min, ...)."""
    if supports_complex(normalize_op(fn, op)):
        return
    if any(jnp.issubdtype(jnp.result_type(_array(t)), jnp.complexfloating) for t in tensors):
        raise ValueError(f"{fn} does not support {op} on complex tensors")


def _by_dtype(tensors: Sequence[Any]) -> list[tuple[list[int], Any, list[tuple[int, ...]]]]:
    """The tensors grouped by dtype, a complex one as its real view (a last axis of 2, as
    tensorplay coalesces them): per group, their indices, their elements in one vector and
    their (real-view) shapes. One collective per group moves them all."""
    groups: dict[Any, list[int]] = {}
    values = [_real_view(jnp.asarray(_array(t))) for t in tensors]
    for i, v in enumerate(values):
        groups.setdefault(v.dtype, []).append(i)
    return [
        (idx, jnp.concatenate([values[i].reshape(-1) for i in idx]), [values[i].shape for i in idx])
        for idx in groups.values()
    ]


def _real_view(v: Any) -> Any:
    return jnp.stack([v.real, v.imag], -1) if jnp.iscomplexobj(v) else v


def _like(value: Any, target: Any) -> Any:
    """``value`` (a piece of a coalesced result) back in ``target``'s form: complex from its
    real view when ``target`` is complex."""
    if jnp.iscomplexobj(_array(target)):
        return jax.lax.complex(value[..., 0], value[..., 1])
    return value


def _split(flat: Any, shapes: list[tuple[int, ...]]) -> list[Any]:
    out, start = [], 0
    for shape in shapes:
        size = int(np.prod(shape))
        out.append(flat[..., start : start + size].reshape((*flat.shape[:-1], *shape)))
        start += size
    return out


@pg.members_only
def all_reduce_coalesced(
    tensors: Any,
    op: ReduceOp | str = ReduceOp.SUM,
    group: ProcessGroup | None = None,
    async_op: bool = False,
) -> Any:
    """tensorplay's ``all_reduce_coalesced``: every Tensor of ``tensors`` reduced in place, in
    one collective per dtype over all their elements."""
    _member("all_reduce_coalesced", group)
    fn = "all_reduce_coalesced"
    items = [tensors] if isinstance(tensors, Tensor) else list(tensors)
    bad = [type(t).__name__ for t in items if not isinstance(t, Tensor)]
    if bad:
        raise TypeError(f"{fn}: tensors must be Tensors, got {bad[0]}")
    _complex_op_check("all_reduce", items, op)
    for idx, flat, shapes in _by_dtype(items):
        with pg.recorded_shapes([list(s) for s in shapes]):
            reduced = pg.all_reduce(flat, op, group)
        for i, value in zip(idx, _split(reduced, shapes), strict=True):
            _fill(fn, items[i], _like(value, items[i]))
    return _written(async_op, items)


@pg.members_only
def all_gather_coalesced(
    output_tensor_lists: Any,
    input_tensor_list: Any,
    group: ProcessGroup | None = None,
    async_op: bool = False,
) -> Any:
    """tensorplay's ``all_gather_coalesced``: ``output_tensor_lists[j][i]`` gets rank j's
    ``input_tensor_list[i]``, in one collective per dtype over all of them."""
    _member("all_gather_coalesced", group)
    fn = "all_gather_coalesced"
    outputs = _list(fn, "output_tensor_lists", output_tensor_lists, _size(group))
    inputs = list(input_tensor_list)
    for j, row in enumerate(outputs):
        if not isinstance(row, list) or len(row) != len(inputs):
            raise ValueError(
                f"{fn}: output_tensor_lists[{j}] must be a list of {len(inputs)} tensors, one "
                "per input."
            )
    for idx, flat, shapes in _by_dtype(inputs):
        with pg.recorded_shapes([list(s) for s in shapes]):
            gathered = pg.all_gather(flat, group)
        pieces = _split(gathered, shapes)  # piece k: (N, *shapes[k])
        for i, piece in zip(idx, pieces, strict=True):
            for j, row in enumerate(outputs):
                _fill_slot(fn, row, i, _like(piece[j], inputs[i]))
    return _written(async_op, outputs)


@pg.members_only
def broadcast(
    tensor: Any,
    src: int | None = None,
    group: ProcessGroup | None = None,
    async_op: bool = False,
    group_src: int | None = None,
) -> Any:
    """``src``'s ``tensor`` on every rank: a Tensor in place, an array returned."""
    src = _global(group, src, group_src)
    if not isinstance(tensor, Tensor):
        return pg.broadcast(tensor, src, group, async_op)
    _member("broadcast", group)
    _fill("broadcast", tensor, pg.broadcast(tensor.value, src, group))
    return _written(async_op, [tensor])


@pg.members_only
def reduce(
    tensor: Any,
    dst: int | None = None,
    op: ReduceOp | str = ReduceOp.SUM,
    group: ProcessGroup | None = None,
    async_op: bool = False,
    group_dst: int | None = None,
) -> Any:
    """The reduction on ``dst``: a Tensor there in place (others unchanged), or returned."""
    dst = _global(group, dst, group_dst)
    if not isinstance(tensor, Tensor):
        return pg.reduce(tensor, dst, op, group, async_op)
    _member("reduce", group)
    out = pg.reduce(tensor.value, dst, op, group)
    if pg.get_rank() == dst:
        _fill("reduce", tensor, out)
    return _written(async_op, [tensor])


@pg.members_only
def all_gather(tensor_list: Any, *args: Any, **kwargs: Any) -> Any:
    """tensorplay's ``all_gather(tensor_list, tensor, group=None, async_op=False)``: slot j
    gets rank j's ``tensor``. The JAX form ``all_gather(x, group=None, async_op=False)``
    returns them stacked."""
    if not isinstance(tensor_list, list):
        return pg.all_gather(tensor_list, *args, **kwargs)
    return _all_gather(tensor_list, *args, **kwargs)


def _all_gather(
    tensor_list: list[Any], tensor: Any, group: ProcessGroup | None = None, async_op: bool = False
) -> Any:
    _member("all_gather", group)
    fn = "all_gather"
    outputs = _list(fn, "tensor_list", tensor_list, _size(group))
    _fill_list(fn, tensor_list, pg.all_gather(_array(tensor), group))
    return _written(async_op, outputs)


@pg.members_only
def gather(tensor: Any, *args: Any, **kwargs: Any) -> Any:
    """tensorplay's ``gather(tensor, gather_list=None, dst=None, group=None, async_op=False,
    group_dst=None)``: ``dst``'s ``gather_list`` gets every rank's ``tensor``. The JAX form
    ``gather(x, dst=0, group=None, async_op=False)`` (an array, ``dst`` second) returns them
    stacked on ``dst``."""
    jax_form = not isinstance(tensor, Tensor) and "gather_list" not in kwargs
    if jax_form and (not args or isinstance(args[0], int)):
        return pg.gather(tensor, *args, **kwargs)
    return _gather(tensor, *args, **kwargs)


def _gather(
    tensor: Any,
    gather_list: list[Any] | None = None,
    dst: int | None = None,
    group: ProcessGroup | None = None,
    async_op: bool = False,
    group_dst: int | None = None,
) -> Any:
    _member("gather", group)
    fn = "gather"
    dst = _global(group, dst, group_dst)
    dst = 0 if dst is None else dst
    here = pg.get_rank() == dst
    if here and not gather_list:
        raise ValueError(f"{fn}: Argument ``gather_list`` must be specified on destination rank.")
    if not here and gather_list:
        raise ValueError(
            f"{fn}: Argument ``gather_list`` must NOT be specified on non-destination ranks."
        )
    if here:
        _list(fn, "gather_list", gather_list, _size(group))
    out = pg.gather(_array(tensor), dst, group)
    if here:
        _fill_list(fn, gather_list, out)
    return _written(async_op, list(gather_list or []))


@pg.members_only
def scatter(tensor: Any, *args: Any, **kwargs: Any) -> Any:
    """tensorplay's ``scatter(tensor, scatter_list=None, src=None, group=None, async_op=False,
    group_src=None)``: ``tensor`` on rank i gets ``src``'s ``scatter_list[i]``. The JAX form
    ``scatter(xs, src=0, group=None, async_op=False)`` (an ``(N, ...)`` array, ``src``
    second) returns this rank's slice."""
    jax_form = not isinstance(tensor, Tensor) and "scatter_list" not in kwargs
    if jax_form and (not args or isinstance(args[0], int)):
        return pg.scatter(tensor, *args, **kwargs)
    return _scatter(tensor, *args, **kwargs)


def _scatter(
    tensor: Any,
    scatter_list: list[Any] | None = None,
    src: int | None = None,
    group: ProcessGroup | None = None,
    async_op: bool = False,
    group_src: int | None = None,
) -> Any:
    _member("scatter", group)
    fn = "scatter"
    src = _global(group, src, group_src)
    src = 0 if src is None else src
    n = _size(group)
    if pg.get_rank() == src:
        if not scatter_list:
            raise ValueError(f"{fn}: Argument ``scatter_list`` must be specified on source rank.")
        stacked = _stack(fn, "scatter_list", _list(fn, "scatter_list", scatter_list, n))
    else:
        if scatter_list:
            raise ValueError(
                f"{fn}: Argument ``scatter_list`` must NOT be specified on non-source ranks."
            )
        like = jnp.asarray(_array(tensor))
        stacked = jnp.zeros((n, *like.shape), like.dtype)
    out = pg.scatter(stacked, src, group)
    return _result(fn, tensor, out, async_op)


@pg.members_only
def reduce_scatter(output: Any, *args: Any, **kwargs: Any) -> Any:
    """tensorplay's ``reduce_scatter(output, input_list, op=SUM, group=None, async_op=False)``:
    ``output`` on rank i gets the reduction of every rank's ``input_list[i]``. The JAX form
    ``reduce_scatter(xs, op=SUM, group=None, async_op=False)`` returns it."""
    given = args[0] if args else kwargs.get("input_list")
    if not isinstance(given, list | tuple):
        return pg.reduce_scatter(output, *args, **kwargs)
    return _reduce_scatter(output, *args, **kwargs)


def _reduce_scatter(
    output: Any,
    input_list: list[Any],
    op: ReduceOp | str = ReduceOp.SUM,
    group: ProcessGroup | None = None,
    async_op: bool = False,
) -> Any:
    _member("reduce_scatter", group)
    fn = "reduce_scatter"
    stacked = _stack(fn, "input_list", _list(fn, "input_list", input_list, _size(group)))
    return _result(fn, output, pg.reduce_scatter(stacked, op, group), async_op)


def _result(fn: str, output: Any, value: Any, async_op: bool) -> Any:
    """A Tensor ``output`` gets ``value`` (tensorplay's return follows); else ``value`` is
    returned (in a finished Work with ``async_op``)."""
    if not isinstance(output, Tensor):
        return Work.completed(value) if async_op else value
    _fill(fn, output, value)
    return _written(async_op, [output])


@pg.members_only
def all_gather_into_tensor(
    output_tensor: Any, input_tensor: Any, group: ProcessGroup | None = None, async_op: bool = False
) -> Any:
    """Every rank's ``input_tensor`` concatenated (or stacked) into ``output_tensor``: a Tensor
    in place, or returned."""
    _member("all_gather_into_tensor", group)
    fn = "all_gather_into_tensor"
    out = pg.all_gather_into_tensor(_array(output_tensor), _array(input_tensor), group)
    return _result(fn, output_tensor, out, async_op)


@pg.members_only
def reduce_scatter_tensor(
    output: Any,
    input: Any,  # tensorplay's name
    op: ReduceOp | str = ReduceOp.SUM,
    group: ProcessGroup | None = None,
    async_op: bool = False,
) -> Any:
    """Rank i's block of the reduction of every rank's ``input``, into ``output``: a Tensor in
    place, or returned."""
    _member("reduce_scatter_tensor", group)
    out = pg.reduce_scatter_tensor(_array(output), _array(input), op, group)
    return _result("reduce_scatter_tensor", output, out, async_op)


@pg.members_only
def all_to_all(output_tensor_list: Any, *args: Any, **kwargs: Any) -> Any:
    """tensorplay's ``all_to_all(output_tensor_list, input_tensor_list, group=None,
    async_op=False)``: ``output_tensor_list[j]`` on rank i gets rank j's
    ``input_tensor_list[i]``. The JAX form ``all_to_all(xs, group=None, async_op=False)``
    returns the stacked result."""
    if not isinstance(output_tensor_list, list):
        return pg.all_to_all(output_tensor_list, *args, **kwargs)
    return _all_to_all(output_tensor_list, *args, **kwargs)


def _all_to_all(
    output_tensor_list: list[Any],
    input_tensor_list: list[Any],
    group: ProcessGroup | None = None,
    async_op: bool = False,
) -> Any:
    _member("all_to_all", group)
    fn = "all_to_all"
    n = _size(group)
    outputs = _list(fn, "output_tensor_list", output_tensor_list, n)
    stacked = _stack(fn, "input_tensor_list", _list(fn, "input_tensor_list", input_tensor_list, n))
    _fill_list(fn, output_tensor_list, pg.all_to_all(stacked, group))
    return _written(async_op, outputs)


@pg.members_only
def all_to_all_single(output: Any, *args: Any, **kwargs: Any) -> Any:
    """tensorplay's ``all_to_all_single(output, input, output_split_sizes=None,
    input_split_sizes=None, group=None, async_op=False)``, into ``output``. The JAX form
    ``all_to_all_single(x, output_split_sizes=None, input_split_sizes=None, group=None,
    async_op=False)`` (split sizes second) returns the result."""
    given = args[0] if args else kwargs.get("input")
    if given is None or isinstance(given, list | tuple):
        return pg.all_to_all_single(output, *args, **kwargs)
    return _all_to_all_single(output, *args, **kwargs)


def _all_to_all_single(
    output: Any,
    input: Any,  # tensorplay's name
    output_split_sizes: list[int] | None = None,
    input_split_sizes: list[int] | None = None,
    group: ProcessGroup | None = None,
    async_op: bool = False,
) -> Any:
    _member("all_to_all_single", group)
    out = pg.all_to_all_single(_array(input), output_split_sizes, input_split_sizes, group)
    return _result("all_to_all_single", output, out, async_op)


class _Filling(Work):
    """The Work of an ``irecv`` into a Tensor: the Tensor gets the data when the call is done."""

    def __init__(self, inner: Work, tensor: Tensor) -> None:
        super().__init__(inner.get_future())
        self._inner, self._tensor, self._written = inner, tensor, False

    def _write(self) -> None:
        if not self._written:
            _fill("irecv", self._tensor, self._inner.result())
            self._written = True

    def wait(self, timeout: float | None = None) -> bool:
        self._inner.wait(timeout)
        self._write()
        return True

    def is_completed(self) -> bool:
        done = self._inner.is_completed()
        if done and self._inner.exception() is None:
            self._write()
        return done

    def result(self) -> Any:
        self.wait()
        return [self._tensor]


@pg.members_only
def irecv(
    tensor: Any,
    src: int | None = None,
    group: ProcessGroup | None = None,
    tag: int = 0,
    group_src: int | None = None,
) -> Work:
    """Queue receiving into ``tensor`` (a Tensor is filled when the Work is waited on; for an
    array, ``result()`` is the received array)."""
    _member("irecv", group)
    work = pg.irecv(_array(tensor), src, group, tag, group_src)
    return _Filling(work, tensor) if isinstance(tensor, Tensor) else work


@pg.members_only
def recv(
    tensor: Any,
    src: int | None = None,
    group: ProcessGroup | None = None,
    tag: int = 0,
    group_src: int | None = None,
    async_op: bool = False,
) -> Any:
    """Receive from ``src``: into a Tensor in place (returns the sender's rank, as
    tensorplay's), or the received array returned."""
    if not isinstance(tensor, Tensor):
        return pg.recv(tensor, src, group, tag, group_src, async_op)
    _member("recv", group)
    work = irecv(tensor, src, group, tag, group_src)
    if async_op:
        return work
    work.wait()
    return _global(group, src, group_src)


def batch_isend_irecv(p2p_op_list: Sequence[pg.P2POp]) -> list[Work]:
    """``process_group.batch_isend_irecv``; each ``irecv`` into a Tensor fills it when waited on."""
    works = pg.batch_isend_irecv(p2p_op_list)
    return [
        _Filling(w, p.tensor)
        if getattr(p.op, "__name__", None) == "irecv" and isinstance(p.tensor, Tensor)
        else w
        for p, w in zip(p2p_op_list, works, strict=True)
    ]
