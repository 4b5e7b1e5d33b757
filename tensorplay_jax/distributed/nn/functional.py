"""Differentiable process-group collectives on tape Tensors (``distributed.nn.functional``).

Each function runs the blocking collective of ``tensorplay_jax.distributed`` on
the Tensor's array and, when the input requires grad, records one tape node
whose backward runs the collective that the rule table of DESIGN.md section 1
names (the tensorplay rule: every rank's output is its own output). Like
tensorplay, the backward is itself a collective: every rank of the group must
run backward through the same calls in the same order (a rank that does not
fails the others within the group's timeout instead of hanging them).

Results are returned, never written into arguments (JAX arrays are immutable).
Derivatives of the non-sum ops match :class:`tensorplay_jax.collectives.ReduceOp`:
avg is the scaled sum, max/min send the gradient to the lowest rank that holds
the extremum, prod uses the product of the other ranks' values (exact with zeros).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from tensorplay_jax import distributed as dist
from tensorplay_jax.autograd import attach_outputs, is_grad_enabled, make_node
from tensorplay_jax.autograd._tensor import Tensor
from tensorplay_jax.collectives import ReduceOp
from tensorplay_jax.collectives._reduce_op import local_partials, normalize_op

__all__ = [
    "all_gather",
    "all_gather_single",
    "all_reduce",
    "all_to_all",
    "all_to_all_single",
    "broadcast",
    "gather",
    "reduce",
    "reduce_scatter",
    "scatter",
]


def _value(fn: str, tensor: Any) -> jax.Array:
    if isinstance(tensor, Tensor):
        return tensor.value
    try:
        return jnp.asarray(tensor)
    except TypeError:
        raise TypeError(
            f"{fn}: expected a tensorplay_jax Tensor or an array, got {type(tensor).__name__}."
        ) from None


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


def _rank(group: Any) -> int:
    return dist.get_rank(group)


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
    fn = "all_reduce"
    op = normalize_op(fn, op)
    x = _value(fn, tensor)
    y = dist.all_reduce(x, op, group)
    n = dist.get_world_size(group)

    def backward(g: jax.Array) -> jax.Array:
        s = dist.all_reduce(g, ReduceOp.SUM, group)
        if op is ReduceOp.SUM:
            return s
        if op is ReduceOp.AVG:
            return s / n
        return s * local_partials(op, dist.all_gather(x, group), _rank(group))

    return _record(fn, tensor, y, backward)


def broadcast(tensor: Any, src: int, group: Any = None) -> Tensor:
    """Every rank gets ``src``'s ``tensor``. Backward: ``src`` gets the sum of the
    gradients, the other ranks zeros.

    Example:
      >>> y = df.broadcast(x, src=0)  # doctest: +SKIP
    """
    fn = "broadcast"
    x = _value(fn, tensor)
    y = dist.broadcast(x, src, group)
    return _record(fn, tensor, y, lambda g: dist.reduce(g, src, ReduceOp.SUM, group))


def reduce(tensor: Any, dst: int, op: ReduceOp | str = ReduceOp.SUM, group: Any = None) -> Tensor:
    """``dst`` gets the reduction, the other ranks zeros. Backward (sum): every rank
    gets ``dst``'s gradient.

    Example:
      >>> y = df.reduce(x, dst=0)  # doctest: +SKIP
    """
    fn = "reduce"
    op = normalize_op(fn, op)
    x = _value(fn, tensor)
    if op in (ReduceOp.SUM, ReduceOp.AVG):
        y = dist.reduce(x, dst, op, group)
        n = dist.get_world_size(group)
        scale = 1.0 / n if op is ReduceOp.AVG else 1.0
        return _record(fn, tensor, y, lambda g: dist.broadcast(g, dst, group) * scale)
    # max/min/prod: the all-reduce's rule, with the other ranks' outputs masked to zero.
    full = all_reduce(tensor, op, group)
    return full * jnp.asarray(dist.get_rank() == dst, full.dtype)


def all_gather(tensor: Any, group: Any = None) -> Tensor:
    """Every rank gets every rank's ``tensor`` stacked to ``(N, ...)``. Backward: rank j
    gets the sum over ranks of their gradient's slice j (a reduce-scatter).

    Example:
      >>> ys = df.all_gather(x)  # doctest: +SKIP
    """
    fn = "all_gather"
    x = _value(fn, tensor)
    y = dist.all_gather(x, group)
    return _record(fn, tensor, y, lambda g: dist.reduce_scatter(g, ReduceOp.SUM, group))


def all_gather_single(tensor: Any, group: Any = None) -> Tensor:
    """Every rank gets every rank's ``(k, ...)`` ``tensor`` concatenated to ``(N*k, ...)``.
    Backward: rank j gets the sum over ranks of their gradient's rows ``j*k:(j+1)*k``.

    Example:
      >>> y = df.all_gather_single(x)  # doctest: +SKIP
    """
    fn = "all_gather_single"
    x = _value(fn, tensor)
    if x.ndim == 0:
        raise ValueError(f"{fn}: tensor is 0-d; it concatenates along axis 0.")
    y = dist.all_gather(x, group)
    y = y.reshape((-1, *x.shape[1:]))
    n = dist.get_world_size(group)
    return _record(
        fn,
        tensor,
        y,
        lambda g: dist.reduce_scatter(g.reshape((n, *x.shape)), ReduceOp.SUM, group),
    )


def gather(tensor: Any, dst: int = 0, group: Any = None) -> Tensor:
    """``dst`` gets every rank's ``tensor`` stacked to ``(N, ...)``, the others zeros.
    Backward: rank i gets slice i of ``dst``'s gradient.

    Example:
      >>> ys = df.gather(x, dst=0)  # doctest: +SKIP
    """
    fn = "gather"
    x = _value(fn, tensor)
    y = dist.gather(x, dst, group)
    return _record(fn, tensor, y, lambda g: dist.scatter(g, dst, group))


def scatter(tensor: Any, src: int = 0, group: Any = None) -> Tensor:
    """Rank i gets slice i of ``src``'s ``(N, ...)`` ``tensor``. Backward: ``src`` gets
    the stacked gradients, the others zeros.

    Example:
      >>> mine = df.scatter(xs, src=0)  # doctest: +SKIP
    """
    fn = "scatter"
    x = _value(fn, tensor)
    y = dist.scatter(x, src, group)
    return _record(fn, tensor, y, lambda g: dist.gather(g, src, group))


def reduce_scatter(tensor: Any, op: ReduceOp | str = ReduceOp.SUM, group: Any = None) -> Tensor:
    """Rank i gets slice i of the reduction of every rank's ``(N, ...)`` ``tensor``.
    Backward (sum): every rank gets the stacked gradients (an all-gather).

    Example:
      >>> mine = df.reduce_scatter(xs)  # doctest: +SKIP
    """
    fn = "reduce_scatter"
    op = normalize_op(fn, op)
    x = _value(fn, tensor)
    y = dist.reduce_scatter(x, op, group)
    n = dist.get_world_size(group)

    def backward(g: jax.Array) -> jax.Array:
        stacked_g = dist.all_gather(g, group)  # (N, ...): slice i is rank i's gradient
        if op is ReduceOp.SUM:
            return stacked_g
        if op is ReduceOp.AVG:
            return stacked_g / n
        return stacked_g * local_partials(op, dist.all_gather(x, group), _rank(group))

    return _record(fn, tensor, y, backward)


def all_to_all(tensor: Any, group: Any = None) -> Tensor:
    """Slice j of each rank's ``(N, ...)`` ``tensor`` goes to rank j. Backward: the
    inverse all-to-all of the gradient.

    Example:
      >>> ys = df.all_to_all(xs)  # doctest: +SKIP
    """
    fn = "all_to_all"
    x = _value(fn, tensor)
    y = dist.all_to_all(x, group)
    return _record(fn, tensor, y, lambda g: dist.all_to_all(g, group))


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
    fn = "all_to_all_single"
    x = _value(fn, tensor)
    y = dist.all_to_all_single(x, output_split_sizes, input_split_sizes, group)
    return _record(
        fn,
        tensor,
        y,
        lambda g: dist.all_to_all_single(g, input_split_sizes, output_split_sizes, group),
    )
