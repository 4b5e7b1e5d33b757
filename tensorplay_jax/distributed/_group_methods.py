"""c10d's methods of a ``ProcessGroup`` object, from one table: each is a collective on that group.

torch code may call a collective on the group object rather than through
``torch.distributed`` with ``group=pg``: ``pg.allreduce([t]).wait()``,
``pg.broadcast(t, root)``, ``pg.send([t], dst, tag)``. Those methods differ from the
module's functions in three ways, all kept here: ranks (``root``, ``dstRank``,
``srcRank``, an options object's ``rootRank``) are *group* ranks; tensors come as
lists (one tensor per process here; ``allreduce`` and ``broadcast`` also take
several, as tensorplay's gloo does); and every call returns a ``Work`` whose
``result()`` is the list of tensors it wrote. Each method takes its options object
(``_group_options``) or the settings as arguments, and writes its outputs in place,
as the in-place collectives (``_inplace_collectives``) that it calls do.

A call on a group this process is not a member of raises (a method has no
"do nothing" form: tensorplay gives such a process no group object). A
per-call ``timeout`` is refused: the group's own (``new_group(timeout=...)``) governs
its calls; see ``docs/porting.md``.

The package's ``__init__`` sets :data:`METHODS` on
:class:`~tensorplay_jax.process_group.ProcessGroup` once, as ``tensors/_methods.py``
sets the Tensor's methods.

Example (two processes):
  >>> import tensorplay_jax as tp
  >>> import tensorplay_jax.distributed as dist
  >>> pg = dist.group.WORLD  # doctest: +SKIP
  >>> t = tp.ones(2) * (pg.rank() + 1)  # doctest: +SKIP
  >>> pg.allreduce([t]).wait()  # doctest: +SKIP
  True
  >>> t  # doctest: +SKIP
  tensor([3., 3.])
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp

from tensorplay_jax import process_group as pg
from tensorplay_jax.collectives.reduce_op import normalize_op, stacked_reduce
from tensorplay_jax.distributed import _inplace_collectives as inplace
from tensorplay_jax.distributed._group_options import (
    AllgatherOptions,
    AllreduceCoalescedOptions,
    AllreduceOptions,
    AllToAllOptions,
    BarrierOptions,
    BroadcastOptions,
    GatherOptions,
    ReduceOptions,
    ReduceScatterOptions,
    ScatterOptions,
)
from tensorplay_jax.process_group import ProcessGroup, Work
from tensorplay_jax.tensors import Tensor, overwrite

__all__ = ["METHODS", "attach"]


# ------------------------------------------------------------------ arguments
def _member(fn: str, self: ProcessGroup) -> None:
    if self.rank() < 0:
        raise RuntimeError(
            f"ProcessGroup.{fn}: global rank {pg.get_rank()} is not a member of this group "
            f"(ranks {list(self.ranks)}); call it on the members only."
        )


def _timeout(fn: str, timeout: Any) -> None:
    if timeout is None or (
        isinstance(timeout, datetime.timedelta) and timeout < datetime.timedelta(0)
    ):
        return
    raise NotImplementedError(
        f"ProcessGroup.{fn}: a per-call timeout ({timeout!r}) is not supported: a group's calls "
        "run under the group's timeout; make the group with new_group(ranks, timeout=...)."
    )


def _options(fn: str, cls: type, given: Any, field: str | None, value: Any, timeout: Any) -> Any:
    """``given`` if it is a ``cls``; else a ``cls`` whose ``field`` is ``given`` (the
    method's positional form, ``pg.broadcast(t, root)``) or ``value`` (its keyword)."""
    if isinstance(given, cls):
        if value is not None:
            raise TypeError(
                f"ProcessGroup.{fn}: pass {field} in the options or as an argument, not both"
            )
        opts = given
    elif dataclasses.is_dataclass(given):  # another method's options
        raise TypeError(f"ProcessGroup.{fn}: expected {cls.__name__}, got {type(given).__name__}")
    else:
        if given is not None and value is not None:
            raise TypeError(f"ProcessGroup.{fn}: {field} given twice")
        opts = cls()
        setting = given if given is not None else value
        if setting is not None:
            if field is None:
                raise TypeError(f"ProcessGroup.{fn}: expected {cls.__name__}, got {setting!r}")
            setattr(opts, field, setting)
    _timeout(fn, timeout if timeout is not None else opts.timeout)
    return opts


def _options_or_timeout(fn: str, cls: type, opts: Any) -> Any:
    """The methods whose second form takes a timeout where the first takes ``cls``."""
    if isinstance(opts, cls):
        _timeout(fn, opts.timeout)
        return opts
    _timeout(fn, opts)
    return cls()


def _rank(fn: str, self: ProcessGroup, rank: Any, what: str = "root") -> int:
    """A valid group rank (tensorplay's "invalid root rank" otherwise)."""
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < self.size():
        raise RuntimeError(
            f"ProcessGroup.{fn}: invalid {what} rank: {rank!r} (group ranks are "
            f"0..{self.size() - 1})"
        )
    return rank


def _nothing_given(fn: str, arg: str, given: Any, root: int) -> None:
    """A rank other than the root passes nothing: ``[]``, ``[[]]`` or None."""
    lists = given if isinstance(given, (list, tuple)) else [given]
    if given is None or all(isinstance(g, (list, tuple)) and not g for g in lists):
        return
    raise RuntimeError(
        f"ProcessGroup.{fn}: requires empty {arg} on non-root ranks (the root is group rank {root})"
    )


def _tensors(fn: str, arg: str, tensors: Any, *, single: bool = False) -> list[Tensor]:
    """``tensors`` as a non-empty list of Tensors (a lone Tensor is a list of one)."""
    if isinstance(tensors, Tensor):
        items = [tensors]
    elif isinstance(tensors, (list, tuple)):
        items = list(tensors)
    else:
        raise TypeError(
            f"ProcessGroup.{fn}: {arg} must be a Tensor or a list of Tensors, got "
            f"{type(tensors).__name__}"
        )
    if not items:
        raise RuntimeError(f"ProcessGroup.{fn}: requires a non-empty tensor list ({arg})")
    bad = [type(t).__name__ for t in items if not isinstance(t, Tensor)]
    if bad:
        raise TypeError(
            f"ProcessGroup.{fn}: {arg} must be tensorplay_jax Tensors (the method writes them in "
            f"place), got {bad[0]}; for arrays call tensorplay_jax.distributed's functions, which "
            "return the result"
        )
    if single and len(items) != 1:
        raise RuntimeError(
            f"ProcessGroup.{fn}: requires a single-element tensor list ({arg} has {len(items)}: "
            "one device per process)"
        )
    return items


def _nested(fn: str, arg: str, lists: Any, n: int) -> list[Any]:
    """The form ``[[t0, ..., tN-1]]`` or ``[t0, ..., tN-1]`` as one flat list of ``n``."""
    if isinstance(lists, (list, tuple)) and lists and isinstance(lists[0], (list, tuple)):
        if len(lists) != 1:
            raise RuntimeError(
                f"ProcessGroup.{fn}: requires a single-element list of tensor lists ({arg} has "
                f"{len(lists)}: one device per process)"
            )
        lists = lists[0]
    items = list(lists) if isinstance(lists, (list, tuple)) else None
    if items is None:
        raise TypeError(
            f"ProcessGroup.{fn}: {arg} must be a list of Tensors, got {type(lists).__name__}"
        )
    if len(items) != n:
        raise RuntimeError(
            f"ProcessGroup.{fn}: invalid tensor list {arg} (expected length {n}, got {len(items)})"
        )
    return items


def _same_layout(fn: str, tensors: list[Tensor]) -> None:
    first = tensors[0]
    for i, t in enumerate(tensors[1:], 1):
        if tuple(t.shape) != tuple(first.shape) or t.dtype != first.dtype:
            raise RuntimeError(
                f"ProcessGroup.{fn}: invalid tensor at index {i} (expected shape "
                f"{tuple(first.shape)} {first.dtype}, got {tuple(t.shape)} {t.dtype})"
            )


def _done(tensors: list[Any]) -> Work:
    return Work.completed(tensors)


# ------------------------------------------------------------------ collectives
def allreduce(
    self: ProcessGroup,
    tensors: Any,
    opts: Any = None,
    timeout: Any = None,
    *,
    op: Any = None,
) -> Work:
    """Reduce ``tensors`` across the group in place; with several tensors, all of them on
    every rank are reduced together and each gets the result (tensorplay's gloo).

    Forms: ``allreduce(tensors, opts=AllreduceOptions())``, ``allreduce(tensors, op)``,
    ``allreduce(tensor, op=ReduceOp.SUM)``.
    """
    fn = "allreduce"
    _member(fn, self)
    o = _options(fn, AllreduceOptions, opts, "reduceOp", op, timeout)
    items = _tensors(fn, "tensors", tensors)
    if len(items) == 1:
        return inplace.all_reduce(items[0], o.reduceOp, self, async_op=True)
    _same_layout(fn, items)
    reduction = normalize_op(fn, o.reduceOp)
    local = stacked_reduce(jnp.stack([t.value for t in items]), reduction)
    total = pg.all_reduce(local, reduction, self)
    for t in items:
        overwrite(t, jnp.asarray(total, dtype=t.dtype))
    return _done(items)


def allreduce_coalesced(self: ProcessGroup, tensors: Any, opts: Any = None) -> Work:
    """Reduce each of ``tensors`` across the group, in one transfer."""
    fn = "allreduce_coalesced"
    _member(fn, self)
    o = _options(fn, AllreduceCoalescedOptions, opts, None, None, None)
    return inplace.all_reduce_coalesced(
        _tensors(fn, "tensors", tensors), o.reduceOp, self, async_op=True
    )


def broadcast(
    self: ProcessGroup, tensors: Any, opts: Any = None, timeout: Any = None, *, root: Any = None
) -> Work:
    """Every tensor on every rank gets the root's ``tensors[rootTensor]``.

    Forms: ``broadcast(tensors, opts=BroadcastOptions())``, ``broadcast(tensor, root)``.
    """
    fn = "broadcast"
    _member(fn, self)
    o = _options(fn, BroadcastOptions, opts, "rootRank", root, timeout)
    root = _rank(fn, self, o.rootRank)
    items = _tensors(fn, "tensors", tensors)
    if not 0 <= o.rootTensor < len(items):
        raise RuntimeError(
            f"ProcessGroup.{fn}: invalid root tensor: {o.rootTensor} ({len(items)} tensors)"
        )
    _same_layout(fn, items)
    source = items[o.rootTensor]
    inplace.broadcast(source, group=self, group_src=root)
    for t in items:
        if t is not source:
            overwrite(t, source.value)
    return _done(items)


def reduce(
    self: ProcessGroup,
    tensors: Any,
    opts: Any = None,
    op: Any = None,
    timeout: Any = None,
    *,
    root: Any = None,
) -> Work:
    """The reduction of every rank's tensor, in place on the root (others unchanged).

    Forms: ``reduce(tensors, opts=ReduceOptions())``, ``reduce(tensor, root, op)``.
    """
    fn = "reduce"
    _member(fn, self)
    if op is not None and isinstance(opts, ReduceOptions):
        raise TypeError(f"ProcessGroup.{fn}: pass reduceOp in the options or op, not both")
    o = _options(fn, ReduceOptions, opts, "rootRank", root, timeout)
    dst = _rank(fn, self, o.rootRank)
    (t,) = _tensors(fn, "tensors", tensors, single=True)
    reduction = o.reduceOp if op is None else op
    return inplace.reduce(t, op=reduction, group=self, async_op=True, group_dst=dst)


def allgather(
    self: ProcessGroup, output_tensors: Any, input_tensors: Any, opts: Any = None
) -> Work:
    """Slot j of the outputs gets group rank j's input.

    Forms: ``allgather([[o0, ..., oN-1]], [t], opts)``, ``allgather([o0, ..., oN-1], t)``.
    """
    fn = "allgather"
    _member(fn, self)
    _options_or_timeout(fn, AllgatherOptions, opts)
    (t,) = _tensors(fn, "input_tensors", input_tensors, single=True)
    outputs = _tensors(
        fn, "output_tensors", _nested(fn, "output_tensors", output_tensors, self.size())
    )
    return inplace.all_gather(outputs, t, self, async_op=True)


def _allgather_base(self: ProcessGroup, output: Any, input: Any, opts: Any = None) -> Work:
    """Every rank's ``input`` concatenated into ``output`` along dimension 0."""
    fn = "_allgather_base"
    _member(fn, self)
    _options(fn, AllgatherOptions, opts, None, None, None)
    (out,) = _tensors(fn, "output", output, single=True)
    return inplace.all_gather_into_tensor(out, input, self, async_op=True)


def gather(
    self: ProcessGroup,
    output_tensors: Any,
    input_tensors: Any,
    opts: Any = None,
    timeout: Any = None,
    *,
    root: Any = None,
) -> Work:
    """The root's outputs get every rank's input; other ranks pass no outputs.

    Forms: ``gather([[o0, ..., oN-1]], [t], opts=GatherOptions())``,
    ``gather([o0, ..., oN-1], t, root)``.
    """
    fn = "gather"
    _member(fn, self)
    o = _options(fn, GatherOptions, opts, "rootRank", root, timeout)
    root = _rank(fn, self, o.rootRank)
    (t,) = _tensors(fn, "input_tensors", input_tensors, single=True)
    if self.rank() != root:
        _nothing_given(fn, "output_tensors", output_tensors, root)
        inplace.gather(t, None, group=self, group_dst=root)
        return _done([])
    nested = _nested(fn, "output_tensors", output_tensors, self.size())
    outputs = _tensors(fn, "output_tensors", nested)
    inplace.gather(t, outputs, group=self, group_dst=root)
    return _done(outputs)


def scatter(
    self: ProcessGroup,
    output_tensors: Any,
    input_tensors: Any,
    opts: Any = None,
    timeout: Any = None,
    *,
    root: Any = None,
) -> Work:
    """Each rank's output gets its slot of the root's inputs; other ranks pass no inputs.

    Forms: ``scatter([o], [[t0, ..., tN-1]], opts=ScatterOptions())``,
    ``scatter(o, [t0, ..., tN-1], root)``.
    """
    fn = "scatter"
    _member(fn, self)
    o = _options(fn, ScatterOptions, opts, "rootRank", root, timeout)
    root = _rank(fn, self, o.rootRank)
    (out,) = _tensors(fn, "output_tensors", output_tensors, single=True)
    if self.rank() != root:
        _nothing_given(fn, "input_tensors", input_tensors, root)
        inputs = None
    else:
        inputs = _nested(fn, "input_tensors", input_tensors, self.size())
    inplace.scatter(out, inputs, group=self, group_src=root)
    return _done([out])


def reduce_scatter(
    self: ProcessGroup,
    output_tensors: Any,
    input_tensors: Any,
    opts: Any = None,
    timeout: Any = None,
    *,
    op: Any = None,
) -> Work:
    """Each rank's output gets the reduction of every rank's slot for it.

    Forms: ``reduce_scatter([o], [[t0, ..., tN-1]], opts=ReduceScatterOptions())``,
    ``reduce_scatter(o, [t0, ..., tN-1], op)``.
    """
    fn = "reduce_scatter"
    _member(fn, self)
    o = _options(fn, ReduceScatterOptions, opts, "reduceOp", op, timeout)
    (out,) = _tensors(fn, "output_tensors", output_tensors, single=True)
    inputs = _nested(fn, "input_tensors", input_tensors, self.size())
    return inplace.reduce_scatter(out, inputs, o.reduceOp, self, async_op=True)


def _reduce_scatter_base(self: ProcessGroup, output: Any, input: Any, opts: Any = None) -> Work:
    """``input`` (every rank's, reduced) split along dimension 0: rank j's part to ``output``."""
    fn = "_reduce_scatter_base"
    _member(fn, self)
    o = _options(fn, ReduceScatterOptions, opts, None, None, None)
    (out,) = _tensors(fn, "output", output, single=True)
    return inplace.reduce_scatter_tensor(out, input, o.reduceOp, self, async_op=True)


def alltoall(self: ProcessGroup, output_tensors: Any, input_tensors: Any, opts: Any = None) -> Work:
    """Output slot j gets group rank j's input slot for this rank."""
    fn = "alltoall"
    _member(fn, self)
    _options(fn, AllToAllOptions, opts, None, None, None)
    n = self.size()
    outputs = _tensors(fn, "output_tensors", _nested(fn, "output_tensors", output_tensors, n))
    inputs = _nested(fn, "input_tensors", input_tensors, n)
    return inplace.all_to_all(outputs, inputs, self, async_op=True)


def alltoall_base(
    self: ProcessGroup,
    output: Any,
    input: Any,
    output_split_sizes: Sequence[int],
    input_split_sizes: Sequence[int],
    opts: Any = None,
) -> Work:
    """``input``'s rows split by ``input_split_sizes`` (empty: evenly), part j to rank j;
    ``output`` gets every rank's part for this rank, split by ``output_split_sizes``."""
    fn = "alltoall_base"
    _member(fn, self)
    _options_or_timeout(fn, AllToAllOptions, opts)
    (out,) = _tensors(fn, "output", output, single=True)
    return inplace.all_to_all_single(
        out,
        input,
        list(output_split_sizes) or None,
        list(input_split_sizes) or None,
        self,
        async_op=True,
    )


def barrier(self: ProcessGroup, opts: Any = None) -> Work:
    """Wait until every member has called it. Forms: ``barrier(opts)``, ``barrier(timeout)``."""
    fn = "barrier"
    _member(fn, self)
    _options_or_timeout(fn, BarrierOptions, opts)
    pg.barrier(self)
    return _done([])


def send(self: ProcessGroup, tensors: Any, dstRank: int, tag: int = 0) -> Work:
    """Send the tensor to group rank ``dstRank``; it goes when the Work is waited on."""
    fn = "send"
    _member(fn, self)
    (t,) = _tensors(fn, "tensors", tensors, single=True)
    return pg.isend(t.value, group=self, tag=tag, group_dst=_rank(fn, self, dstRank, "destination"))


def recv(self: ProcessGroup, tensors: Any, srcRank: int, tag: int = 0) -> Work:
    """Receive into the tensor from group rank ``srcRank`` (when the Work is waited on);
    the Work's ``source_rank()`` is ``srcRank``."""
    fn = "recv"
    _member(fn, self)
    (t,) = _tensors(fn, "tensors", tensors, single=True)
    src = _rank(fn, self, srcRank, "source")
    work = inplace.irecv(t, group=self, tag=tag, group_src=src)
    work._source = src
    return work


def monitored_barrier(
    self: ProcessGroup, timeout: Any = None, wait_all_ranks: bool = False
) -> None:
    """``monitored_barrier(group=self, timeout, wait_all_ranks)``: group rank 0 names the
    ranks that did not arrive (c10d's ``ProcessGroup.monitored_barrier``)."""
    pg.monitored_barrier(self, timeout, wait_all_ranks)


# ------------------------------------------------------------------ names
def name(self: ProcessGroup) -> str:
    """The backend's name (``"gloo"`` or ``"nccl"``)."""
    return pg.get_backend(self)


def _group_name(self: ProcessGroup) -> str:
    """The group's name: ``"0"`` for the default group, then one per ``new_group``, in order."""
    return str(self.gid)


METHODS: dict[str, Any] = {
    "allreduce": allreduce,
    "allreduce_coalesced": allreduce_coalesced,
    "broadcast": broadcast,
    "reduce": reduce,
    "allgather": allgather,
    "_allgather_base": _allgather_base,
    "gather": gather,
    "scatter": scatter,
    "reduce_scatter": reduce_scatter,
    "_reduce_scatter_base": _reduce_scatter_base,
    "alltoall": alltoall,
    "alltoall_base": alltoall_base,
    "barrier": barrier,
    "send": send,
    "recv": recv,
    "monitored_barrier": monitored_barrier,
    "name": name,
    "group_name": property(_group_name),
}


def attach() -> None:
    """Set every method of :data:`METHODS` on ``ProcessGroup``."""
    for attr, fn in METHODS.items():
        setattr(ProcessGroup, attr, fn)
