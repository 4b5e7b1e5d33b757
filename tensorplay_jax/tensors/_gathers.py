"""Reads at indices along one dimension (``gather``, ``take_along_dim``, ``index_select``,
``masked_select``) and ``index_add``, each one recorded node.

Indices out of range raise torch's ``RuntimeError``/``IndexError`` when they are concrete
(JAX would clamp a read and drop a write instead, silently); inside a JAX trace they
cannot be checked. ``masked_select`` has as many elements as the mask has True ones, so
it runs eagerly only. The scatters (``scatter``, ``scatter_add``) are in ``_inplace``,
beside their in-place forms; ``select``, a view, is in ``_shape_ops``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tensorplay_jax.autograd import call_op
from tensorplay_jax.tensors._host import concrete
from tensorplay_jax.tensors._tensor import Tensor

__all__ = ["gather", "index_add", "index_select", "masked_select", "take_along_dim"]


def _array(x: Any) -> Any:
    return x._value if isinstance(x, Tensor) else x


def _ndim(x: Any) -> int:
    return int(np.ndim(_array(x)))


def _axis(dim: int, ndim: int, op: str) -> int:
    """``dim`` as a non-negative axis; torch's IndexError when out of range."""
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise IndexError(
            f"{op}: Dimension out of range (expected to be in range of [{-n}, {n - 1}], but "
            f"got {dim})"
        )
    return dim % n


def _check_index(index: Any, size: int, axis: int, op: str) -> None:
    """torch's error for an index outside ``[-size, size)``; nothing for a traced one."""
    idx = _array(index)
    if isinstance(idx, jax.core.Tracer):
        return
    idx = np.asarray(idx)
    if not np.issubdtype(idx.dtype, np.integer):
        raise RuntimeError(f"{op}(): Expected dtype int64 for index, got {idx.dtype}")
    if idx.size and (idx.min() < -size or idx.max() >= size):
        bad = idx[(idx < -size) | (idx >= size)].flat[0]
        raise RuntimeError(
            f"{op}(): index {int(bad)} is out of bounds for dimension {axis} with size {size}"
        )


def _gather(x: jax.Array, index: jax.Array, axis: int) -> jax.Array:
    # torch's index may be smaller than the input in the other dimensions
    part = tuple(slice(None) if d == axis else slice(0, n) for d, n in enumerate(index.shape))
    return jnp.take_along_axis(x[part], index, axis=axis)


def gather(input: Any, dim: int, index: Any, *, sparse_grad: bool = False) -> Tensor:
    """``out[i][j] = input[index[i][j]][j]`` for ``dim=0`` (likewise for others): torch's
    ``gather``; ``index`` has ``input``'s number of dimensions and is no larger in the others.

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.gather(tp.tensor([[1.0, 2.0], [3.0, 4.0]]), 1, tp.tensor([[1], [0]]))
        tensor([[2.],
                [3.]])
    """
    del sparse_grad  # the gradient is dense
    nd = _ndim(input)
    axis = _axis(dim, nd, "gather")
    if _ndim(index) != nd:
        raise RuntimeError("Index tensor must have the same number of dimensions as input tensor")
    shape, ishape = np.shape(_array(input)), np.shape(_array(index))
    for d, (n, m) in enumerate(zip(shape, ishape, strict=True)):
        if d != axis and m > n:
            raise RuntimeError(
                f"Size does not match at dimension {d} expected index {list(ishape)} to be no "
                f"larger than self {list(shape)} apart from dimension {axis}"
            )
    _check_index(index, shape[axis] if shape else 1, axis, "gather")
    return call_op(_gather, "GatherBackward", (input, index), (("axis", axis),))


def _take_along(x: jax.Array, index: jax.Array, axis: int | None) -> jax.Array:
    if axis is None:
        return jnp.take_along_axis(x.reshape(-1), index.reshape(-1), axis=0)
    return jnp.take_along_axis(x, index, axis=axis)


def take_along_dim(input: Any, indices: Any, dim: int | None = None) -> Tensor:
    """``input``'s values at ``indices`` along ``dim`` (shapes broadcast, as NumPy's
    ``take_along_axis``); without ``dim``, of the flattened input."""
    shape = np.shape(_array(input))
    if dim is None:
        _check_index(indices, int(np.prod(shape)), 0, "take_along_dim")
        return call_op(_take_along, "TakeAlongDimBackward", (input, indices), (("axis", None),))
    axis = _axis(dim, len(shape), "take_along_dim")
    _check_index(indices, shape[axis], axis, "take_along_dim")
    return call_op(_take_along, "TakeAlongDimBackward", (input, indices), (("axis", axis),))


def _index_select(x: jax.Array, index: jax.Array, axis: int) -> jax.Array:
    return jnp.take(x, index.reshape(-1), axis=axis)


def index_select(input: Any, dim: int, index: Any) -> Tensor:
    """The slices of ``input`` at the positions ``index`` (1-d) along ``dim``, in that order.

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.index_select(tp.tensor([[1.0, 2.0, 3.0]]), 1, tp.tensor([2, 0]))
        tensor([[3., 1.]])
    """
    shape = np.shape(_array(input))
    axis = _axis(dim, len(shape), "index_select")
    if _ndim(index) > 1:
        raise IndexError("index_select(): Index is supposed to be a vector")
    _check_index(index, shape[axis] if shape else 1, axis, "index_select")
    return call_op(_index_select, "IndexSelectBackward", (input, index), (("axis", axis),))


def _take_flat(x: jax.Array, positions: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    return jnp.broadcast_to(x, shape).reshape(-1)[positions]


def masked_select(input: Any, mask: Any) -> Tensor:
    """The elements of ``input`` where ``mask`` (broadcast with it) is True, as a 1-d Tensor.

    Eager only: the result's length is the number of True elements.

    Example:
        >>> import tensorplay_jax as tp
        >>> x = tp.tensor([[1.0, -2.0], [-3.0, 4.0]])
        >>> tp.masked_select(x, x > 0)
        tensor([1., 4.])
    """
    concrete(_array(input), "masked_select", "tp.where(mask, input, 0)")  # no tracer
    m = concrete(_array(mask), "masked_select", "tp.where(mask, input, 0)")
    if m.dtype != np.bool_:
        raise RuntimeError(f"masked_select: expected BoolTensor for mask, got {m.dtype}")
    shape = np.broadcast_shapes(np.shape(_array(input)), m.shape)
    positions = np.flatnonzero(np.broadcast_to(m, shape)).astype(np.int32)
    return call_op(_take_flat, "MaskedSelectBackward", (input, positions), (("shape", shape),))


def _index_add(
    x: jax.Array, index: jax.Array, source: jax.Array, alpha: Any, axis: int
) -> jax.Array:
    where = (slice(None),) * axis + (index.reshape(-1),)
    return x.at[where].add((source * alpha).astype(x.dtype))


def index_add(input: Any, dim: int, index: Any, source: Any, *, alpha: Any = 1) -> Tensor:
    """``input`` with ``alpha * source``'s slices added at the positions ``index`` along
    ``dim`` (repeated positions add up).

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.index_add(tp.zeros(3), 0, tp.tensor([0, 2, 0]), tp.tensor([1.0, 2.0, 3.0]))
        tensor([4., 0., 2.])
    """
    shape = np.shape(_array(input))
    axis = _axis(dim, len(shape), "index_add")
    _check_index(index, shape[axis] if shape else 1, axis, "index_add")
    return call_op(_index_add, "IndexAddBackward", (input, index, source, alpha), (("axis", axis),))
