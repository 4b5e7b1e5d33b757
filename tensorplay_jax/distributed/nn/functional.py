"""Differentiable process-group collectives on tape Tensors (``distributed.nn.functional``).

Each function runs the blocking collective of ``tensorplay_jax.distributed`` on
the Tensor's array and, when the input requires grad, records one tape node
whose backward runs the collective that the rule table
(``tensorplay_jax.collectives.rules``) names (the tensorplay rule: every rank's
output is its own output); ``_BACKWARD`` below runs that table. Like
tensorplay, the backward is itself a collective: every rank of the group must
run backward through the same calls in the same order (a rank that does not
fails the others within the group's timeout instead of hanging them).

Results are returned, never written into arguments (JAX arrays are immutable).
tensorplay's list forms are accepted beside the stacked ``(N, ...)`` form:
``scatter`` and ``all_to_all`` take lists of Tensors (one per rank) and
``all_to_all`` of lists returns a tuple; ``gather`` and ``all_gather`` return one
stacked Tensor, which unpacks, indexes and iterates as the tuple tensorplay
returns (``a, b = all_gather(x)``, ``tp.cat(all_gather(x), dim=1)``). A list's
elements are stacked or concatenated on the tape, so every element gets its gradient.
Derivatives of the non-sum ops match :class:`tensorplay_jax.collectives.ReduceOp`:
avg is the scaled sum, max/min send the gradient to the lowest rank that holds
the extremum, prod uses the product of the other ranks' values (exact with zeros).

Adding a process-group collective (``foo``), in order; the tests named catch a
step left out:

1. ``process_group/engine.py``: ``foo`` as a method of the ``Engine`` protocol.
   The descriptors' wire code (``process_group/_descriptor.py``) follows from it.
2. Every registered engine (``process_group/_engine_shm.py``, ``_engine_tcp.py``,
   ``_engine_xla.py``, and any registered elsewhere): the method, with the
   protocol's parameters (``tests/test_layering.py`` checks every engine).
3. ``process_group/_collectives.py``: the public ``foo`` (validate the arguments,
   build the descriptor, call ``g.engine.foo``), in its ``__all__``; one re-export
   line in ``process_group/__init__.py`` (``tensorplay_jax.distributed``
   re-exports that package's ``__all__`` as it stands).
4. Here: the differentiable ``foo`` and its rule in ``_BACKWARD``, and its row in
   the rule table (``collectives/rules.py``) when it is a new one;
   ``tests/test_layering.py`` checks that the ``Engine`` protocol declares every
   collective the table runs, ``tests/collectives/test_rules.py`` that each rule runs
   its row's ``transpose``.
5. Tests: the engines' matrix (``tests/distributed/test_process_group.py``), the
   tape's (``tests/distributed/nn``); the list of collectives in
   ``docs/guides/process_groups.md``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tensorplay_jax import collectives
from tensorplay_jax import distributed as dist
from tensorplay_jax.autograd import attach_outputs, is_grad_enabled, make_node
from tensorplay_jax.collectives import ReduceOp
from tensorplay_jax.collectives.reduce_op import local_partials, normalize_op
from tensorplay_jax.tensors import Tensor, cat, split, stack

# The ten collectives of ``tensorplay_jax.collectives``, each under its own name.
__all__ = [name for name in collectives.__all__ if name != "ReduceOp"]


def _value(fn: str, tensor: Any) -> jax.Array:
    if isinstance(tensor, Tensor):
        return tensor.value
    try:
        return jnp.asarray(tensor)
    except TypeError:
        raise TypeError(
            f"{fn}: expected a tensorplay_jax Tensor or an array, got {type(tensor).__name__}."
        ) from None


# The list forms: a list of tensors, one per rank of the group, goes through the
# stacked form by ``stack`` (or ``cat``) on the tape, so each element gets its gradient.
_LISTS = (list, tuple)


def _tensors(fn: str, arg: str, tensors: Sequence[Any], group: Any) -> list[Tensor]:
    """``tensors`` as Tensors, after checking there is one per rank of ``group``."""
    n = dist.get_world_size(group)
    if len(tensors) != n:
        raise ValueError(
            f"{fn}: {arg} holds {len(tensors)} tensors but the group has {n} ranks; "
            "pass one tensor per rank."
        )
    return [t if isinstance(t, Tensor) else Tensor(_value(fn, t)) for t in tensors]


def _stacked(fn: str, arg: str, tensors: list[Tensor]) -> Tensor:
    shapes = [tuple(t.shape) for t in tensors]
    if len(set(shapes)) > 1:
        raise ValueError(
            f"{fn}: the tensors of {arg} differ in shape ({shapes}); this form needs one shape "
            "for every rank's tensor."
        )
    return stack(tensors)


def _record(
    name: str, tensor: Any, y: jax.Array, backward: Callable[[jax.Array], jax.Array]
) -> Tensor:
    """Wrap ``y``; if ``tensor`` requires grad, as the output of a node running ``backward``."""
    if not (isinstance(tensor, Tensor) and tensor.requires_grad and is_grad_enabled()):
        return Tensor(y)

    def vjp(grads: Sequence[jax.Array | None]) -> tuple[jax.Array]:
        # Run the backward collective even when no gradient reached this output, so
        # every rank takes part in it (a zero cotangent, not a missing peer).
        g = grads[0] if grads[0] is not None else jnp.zeros_like(y)
        return (backward(g),)

    node = make_node(vjp, [tensor], num_outputs=1, name=f"{name}Backward", run_without_grads=True)
    (out,) = attach_outputs(node, [y])
    return out


@dataclasses.dataclass(frozen=True)
class _Call:
    """One forward call: what its backward needs (``root`` is src or dst, a global rank)."""

    x: jax.Array
    group: Any
    op: ReduceOp = ReduceOp.SUM
    root: int = -1
    splits: tuple[Any, Any] = (None, None)  # (output_split_sizes, input_split_sizes)


# The backward of each collective for op=sum: the rule table
# (``tensorplay_jax.collectives.rules``), as blocking collectives on the cotangent g. Each
# runs its rule's ``transpose`` collective (tests/collectives/test_rules.py checks it).
_BACKWARD: dict[str, Callable[[jax.Array, _Call], jax.Array]] = {
    "all_reduce": lambda g, c: dist.all_reduce(g, ReduceOp.SUM, c.group),
    "broadcast": lambda g, c: dist.reduce(g, c.root, ReduceOp.SUM, c.group),
    "reduce": lambda g, c: dist.broadcast(g, c.root, c.group),
    "gather": lambda g, c: dist.scatter(g, c.root, c.group),
    "scatter": lambda g, c: dist.gather(g, c.root, c.group),
    "reduce_scatter": lambda g, c: dist.all_gather(g, c.group),
    "all_gather": lambda g, c: dist.reduce_scatter(g, ReduceOp.SUM, c.group),
    "all_gather_single": lambda g, c: dist.reduce_scatter(
        g.reshape((-1, *c.x.shape)), ReduceOp.SUM, c.group
    ),
    "all_to_all": lambda g, c: dist.all_to_all(g, c.group),
    "all_to_all_single": lambda g, c: dist.all_to_all_single(g, *reversed(c.splits), c.group),
}


def _backward(name: str, call: _Call) -> Callable[[jax.Array], jax.Array]:
    """The table's rule for ``name``, scaled for ``call.op`` (the ReduceOp derivatives).

    avg divides the sum rule by N; max/min/prod multiply it by this rank's partial
    derivative (``local_partials``), which needs every rank's input (an all-gather).
    """

    def backward(g: jax.Array) -> jax.Array:
        s = _BACKWARD[name](g, call)
        if call.op is ReduceOp.SUM:
            return s
        if call.op is ReduceOp.AVG:
            return s / dist.get_world_size(call.group)
        stacked = dist.all_gather(call.x, call.group)
        return s * local_partials(call.op, stacked, dist.get_rank(call.group))

    return backward


def _collective(
    name: str, tensor: Any, forward: Callable[[jax.Array], jax.Array], **call: Any
) -> Tensor:
    """Run ``forward`` on ``tensor``'s array and record the table's backward for it."""
    x = _value(name, tensor)
    return _record(name, tensor, forward(x), _backward(name, _Call(x, **call)))


def all_reduce(tensor: Any, op: ReduceOp | str = ReduceOp.SUM, group: Any = None) -> Tensor:
    """Every rank gets the reduction of every rank's ``tensor``; differentiable.

    Backward (sum): the all-reduce (sum) of every rank's gradient.

    Args:
      tensor: this rank's Tensor (or array); the same shape and dtype on every rank.
      op: sum, avg, max, min or prod (a :class:`ReduceOp` or its name).
      group: a group from ``new_group`` (default: every process).

    Returns:
      A Tensor, recorded on the tape when ``tensor`` requires grad.

    Example:
      >>> import tensorplay_jax as tp, tensorplay_jax.distributed as dist
      >>> import tensorplay_jax.distributed.nn.functional as df
      >>> dist.init_process_group("gloo")  # doctest: +SKIP
      >>> x = tp.randn(4, 8, requires_grad=True)  # doctest: +SKIP
      >>> df.all_reduce(x).sum().backward()  # x.grad == world size  # doctest: +SKIP
    """
    op = normalize_op("all_reduce", op)
    return _collective(
        "all_reduce", tensor, lambda x: dist.all_reduce(x, op, group), group=group, op=op
    )


def broadcast(tensor: Any, src: int, group: Any = None) -> Tensor:
    """Every rank gets ``src``'s ``tensor``. Backward: ``src`` gets the sum of the
    gradients, the other ranks zeros.

    Example:
      >>> y = df.broadcast(x, src=0)  # doctest: +SKIP
    """
    return _collective(
        "broadcast", tensor, lambda x: dist.broadcast(x, src, group), group=group, root=src
    )


def reduce(tensor: Any, dst: int, op: ReduceOp | str = ReduceOp.SUM, group: Any = None) -> Tensor:
    """``dst`` gets the reduction, the other ranks zeros. Backward (sum): every rank
    gets ``dst``'s gradient.

    Example:
      >>> y = df.reduce(x, dst=0)  # doctest: +SKIP
    """
    op = normalize_op("reduce", op)
    if op in (ReduceOp.SUM, ReduceOp.AVG):
        return _collective(
            "reduce", tensor, lambda x: dist.reduce(x, dst, op, group), group=group, op=op, root=dst
        )
    # max/min/prod: the all-reduce's rule, with the other ranks' outputs masked to zero.
    full = all_reduce(tensor, op, group)
    return full * jnp.asarray(dist.get_rank() == dst, full.dtype)


def all_gather(tensor: Any, group: Any = None) -> Tensor:
    """Every rank gets every rank's ``tensor`` stacked to ``(N, ...)``. Backward: rank j
    gets the sum over ranks of their gradient's slice j (a reduce-scatter).

    The result unpacks like tensorplay's tuple: ``ys[j]`` is rank j's tensor, and
    ``a, b = all_gather(x)``, ``list(ys)`` and ``tp.cat(ys, dim=1)`` work, with gradients.

    Example:
      >>> ys = df.all_gather(x)  # doctest: +SKIP
      >>> mine, theirs = df.all_gather(x)  # two ranks  # doctest: +SKIP
    """
    return _collective("all_gather", tensor, lambda x: dist.all_gather(x, group), group=group)


def all_gather_single(tensor: Any, group: Any = None) -> Tensor:
    """Every rank gets every rank's ``(k, ...)`` ``tensor`` concatenated to ``(N*k, ...)``.
    Backward: rank j gets the sum over ranks of their gradient's rows ``j*k:(j+1)*k``.

    Example:
      >>> y = df.all_gather_single(x)  # doctest: +SKIP
    """
    fn = "all_gather_single"
    if _value(fn, tensor).ndim == 0:
        raise ValueError(f"{fn}: tensor is 0-d; it concatenates along axis 0.")

    def forward(x: jax.Array) -> jax.Array:
        return dist.all_gather(x, group).reshape((-1, *x.shape[1:]))

    return _collective(fn, tensor, forward, group=group)


def gather(tensor: Any, dst: int = 0, group: Any = None) -> Tensor:
    """``dst`` gets every rank's ``tensor`` stacked to ``(N, ...)``, the others zeros.
    Backward: rank i gets slice i of ``dst``'s gradient. The result unpacks like
    tensorplay's tuple (see :func:`all_gather`).

    Example:
      >>> ys = df.gather(x, dst=0)  # doctest: +SKIP
    """
    return _collective(
        "gather", tensor, lambda x: dist.gather(x, dst, group), group=group, root=dst
    )


def scatter(tensors: Any, src: int = 0, group: Any = None) -> Tensor:
    """Rank i gets piece i of ``src``'s tensors. Backward: ``src`` gets the stacked
    gradients (each list element its own), the others zeros.

    Args:
      tensors: tensorplay's form, a list of N equally shaped tensors (only ``src``'s
        values are read; the other ranks may pass None), or one ``(N, ...)`` tensor
        on every rank.
      src: the global rank whose tensors are scattered.
      group: a group from ``new_group`` (default: every process).

    Returns:
      This rank's piece, a Tensor recorded on the tape when the input requires grad.

    Example:
      >>> mine = df.scatter([x0, x1], src=0)  # on rank 0; others pass None  # doctest: +SKIP
      >>> mine = df.scatter(xs, src=0)  # xs of shape (N, ...) on every rank  # doctest: +SKIP
    """
    if tensors is None or isinstance(tensors, _LISTS):
        tensors = _scatter_input(tensors, src, group)
    return _collective(
        "scatter", tensors, lambda x: dist.scatter(x, src, group), group=group, root=src
    )


_DTYPES = ("float32", "float64", "float16", "bfloat16", "int32", "int64", "int16", "int8",
           "uint8", "uint32", "bool")  # fmt: skip
_MAX_NDIM = 16


def _scatter_input(tensors: Sequence[Any] | None, src: int, group: Any) -> Tensor:
    """The stacked input of a list-form scatter; ``src`` broadcasts the shape, dtype and
    whether it needs gradients first (a small fixed-size header), so receivers may pass
    None as tensorplay documents and still take part in the backward scatter's gather."""
    fn = "scatter"
    mine = dist.get_rank() == src
    if tensors is None and mine:
        raise ValueError(
            f"{fn}: tensors=None on src={src}, this rank; the source passes the list to "
            "scatter, one tensor per rank."
        )
    x = (
        None
        if tensors is None
        else _stacked(fn, "tensors", _tensors(fn, "tensors", tensors, group))
    )
    header = np.zeros(3 + _MAX_NDIM, np.int32)
    if mine:
        shape, dtype = x.shape[1:], str(x.dtype)
        if dtype not in _DTYPES or len(shape) > _MAX_NDIM:
            raise TypeError(
                f"{fn}: tensors of dtype {dtype} and {len(shape)} dimensions cannot go as a "
                f"list; supported: {', '.join(_DTYPES)}, up to {_MAX_NDIM} dimensions."
            )
        header[:3] = len(shape), _DTYPES.index(dtype), x.requires_grad and is_grad_enabled()
        header[3 : 3 + len(shape)] = shape
    header = np.asarray(dist.broadcast(jnp.asarray(header), src, group))
    shape, dtype = tuple(int(d) for d in header[3 : 3 + header[0]]), _DTYPES[header[1]]
    if x is None:  # a leaf needing grad when src's does: this rank's backward then takes part
        zeros = jnp.zeros((dist.get_world_size(group), *shape), dtype)
        return Tensor(zeros, requires_grad=bool(header[2]))
    if (tuple(x.shape[1:]), str(x.dtype)) != (shape, dtype):
        raise ValueError(
            f"{fn}: this rank's tensors are {tuple(x.shape[1:])} {x.dtype} but src={src}'s are "
            f"{shape} {dtype}; pass tensors shaped like the source's, or None."
        )
    return Tensor(x.value, requires_grad=True) if header[2] and not x.requires_grad else x


def reduce_scatter(tensor: Any, op: ReduceOp | str = ReduceOp.SUM, group: Any = None) -> Tensor:
    """Rank i gets slice i of the reduction of every rank's ``(N, ...)`` ``tensor`` (or
    piece i of a list of N tensors). Backward (sum): every rank gets the stacked
    gradients (an all-gather).

    Example:
      >>> mine = df.reduce_scatter(xs)  # doctest: +SKIP
    """
    op = normalize_op("reduce_scatter", op)
    if isinstance(tensor, _LISTS):
        tensor = _stacked(
            "reduce_scatter", "tensor", _tensors("reduce_scatter", "tensor", tensor, group)
        )
    return _collective(
        "reduce_scatter", tensor, lambda x: dist.reduce_scatter(x, op, group), group=group, op=op
    )


def all_to_all(
    output_tensor_list: Any, input_tensor_list: Any = None, group: Any = None
) -> Tensor | tuple[Tensor, ...]:
    """Piece j of each rank's input goes to rank j: ``y_i[j] = x_j[i]``. Backward: the
    inverse all-to-all of the gradient.

    Three forms: tensorplay's ``all_to_all(output_tensor_list, input_tensor_list, group)``
    (the outputs' shapes say what arrives; pieces may differ in shape) and
    ``all_to_all([x0, ..., xN-1], group)`` (equal shapes) return a tuple of N Tensors,
    each input element getting its own gradient; ``all_to_all(xs, group)`` on one
    ``(N, ...)`` tensor returns one stacked Tensor.

    Example:
      >>> y0, y1 = df.all_to_all([x0, x1])  # two ranks  # doctest: +SKIP
      >>> ys = df.all_to_all([tp.zeros(2), tp.zeros(3)], [a, b])  # doctest: +SKIP
      >>> ys = df.all_to_all(xs)  # doctest: +SKIP
    """
    fn = "all_to_all"
    if isinstance(input_tensor_list, _LISTS):
        if not isinstance(output_tensor_list, _LISTS):
            raise TypeError(
                f"{fn}: output_tensor_list must be a list of tensors beside input_tensor_list, "
                f"got {type(output_tensor_list).__name__}."
            )
        return _all_to_all_lists(output_tensor_list, input_tensor_list, group)
    if input_tensor_list is not None:  # the group, given positionally
        if group is not None:
            raise TypeError(f"{fn}: group given twice (positionally and by keyword).")
        group = input_tensor_list
    if isinstance(output_tensor_list, _LISTS):
        return _all_to_all_lists(None, output_tensor_list, group)
    return _collective(fn, output_tensor_list, lambda x: dist.all_to_all(x, group), group=group)


def _all_to_all_lists(
    outputs: Sequence[Any] | None, inputs: Sequence[Any], group: Any
) -> tuple[Tensor, ...]:
    """The list forms: equal shapes go stacked; otherwise the pieces go flattened,
    concatenated, through ``all_to_all_single`` with the sizes as split sizes."""
    fn = "all_to_all"
    xs = _tensors(fn, "input_tensor_list", inputs, group)
    if outputs is None:
        return tuple(all_to_all(_stacked(fn, "input_tensor_list", xs), group=group).unbind(0))
    shapes = [
        tuple(_value(fn, t).shape) for t in _tensors(fn, "output_tensor_list", outputs, group)
    ]
    if len({*shapes, *(tuple(x.shape) for x in xs)}) == 1:
        return tuple(all_to_all(stack(xs), group=group).unbind(0))
    out_sizes = [int(np.prod(s)) for s in shapes]
    flat = cat([x.reshape(-1) for x in xs])
    y = all_to_all_single(flat, out_sizes, [int(np.prod(x.shape)) for x in xs], group)
    return tuple(p.reshape(s) for p, s in zip(split(y, out_sizes), shapes, strict=True))


def all_to_all_single(
    tensor: Any,
    output_split_sizes: Sequence[int] | None = None,
    input_split_sizes: Sequence[int] | None = None,
    group: Any = None,
) -> Tensor:
    """Rows split by ``input_split_sizes`` go to ranks 0..N-1; received pieces are
    concatenated. Backward: the inverse exchange, split sizes swapped.

    Example:
      >>> y = df.all_to_all_single(x, [1, 3], [2, 2])  # doctest: +SKIP
    """
    splits = (output_split_sizes, input_split_sizes)
    return _collective(
        "all_to_all_single",
        tensor,
        lambda x: dist.all_to_all_single(x, *splits, group),
        group=group,
        splits=splits,
    )
