"""Scans and orderings along one dimension (``cumsum``, ``cumprod``, ``sort``, ``argsort``,
``topk``), each one recorded node.

Sorting is stable whatever ``stable`` says (torch leaves the order of equal elements
open unless asked; a stable order is one of torch's answers and the same on every
backend here), and NaN sorts above every number, as torch's does: last ascending,
first descending. ``sort`` and ``topk`` return ``(values, indices)`` named tuples; the
gradient reaches the input through ``values``, at the positions ``indices`` name.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from tensorplay_jax.autograd import call_op
from tensorplay_jax.tensors._tensor import Tensor

__all__ = ["SortResult", "TopkResult", "argsort", "cumprod", "cumsum", "sort", "topk"]


class SortResult(NamedTuple):
    """``(values, indices)`` of ``sort`` (torch's ``torch.return_types.sort``)."""

    values: Tensor
    indices: Tensor


class TopkResult(NamedTuple):
    """``(values, indices)`` of ``topk`` (torch's ``torch.return_types.topk``)."""

    values: Tensor
    indices: Tensor


def _scan_dtype(x: jax.Array, dtype: Any) -> Any:
    """torch's accumulation type: the given one, else integers and bools add up in the
    default integer type (int64, or int32 without JAX's 64-bit mode)."""
    if dtype is not None:
        return jnp.dtype(dtype)
    if jnp.issubdtype(x.dtype, jnp.integer) or x.dtype == jnp.bool_:
        return jax.dtypes.canonicalize_dtype(jnp.int64)
    return x.dtype


def _cumsum(x: jax.Array, axis: int, dtype: Any) -> jax.Array:
    return jnp.cumsum(x, axis=axis, dtype=_scan_dtype(x, dtype))


def _cumprod(x: jax.Array, axis: int, dtype: Any) -> jax.Array:
    return jnp.cumprod(x, axis=axis, dtype=_scan_dtype(x, dtype))


def cumsum(input: Any, dim: int, *, dtype: Any = None) -> Tensor:
    """Running sum along ``dim``; integers and bools sum in the default integer type.

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.cumsum(tp.tensor([[1.0, 2.0], [3.0, 4.0]]), dim=1)
        tensor([[1., 3.],
                [3., 7.]])
    """
    return call_op(_cumsum, "CumsumBackward", (input,), (("axis", int(dim)), ("dtype", dtype)))


def cumprod(input: Any, dim: int, *, dtype: Any = None) -> Tensor:
    """Running product along ``dim`` (its gradient is right where an element is zero)."""
    return call_op(_cumprod, "CumprodBackward", (input,), (("axis", int(dim)), ("dtype", dtype)))


def _order(x: jax.Array, axis: int, descending: bool) -> jax.Array:
    """The stable sorting permutation along ``axis``, NaN above every number."""
    if not jnp.issubdtype(x.dtype, jnp.floating):
        return jnp.argsort(x, axis=axis, stable=True, descending=descending)
    # Sort by (is NaN, value): NaN is then the largest key, whichever the direction; + 0.0
    # makes -0.0 equal to 0.0, as comparisons see them (the sort orders them otherwise).
    nan = jnp.isnan(x)
    keys = jnp.where(nan, jnp.zeros_like(x), x)
    if descending:
        nan, keys = ~nan, -keys  # descending: NaN first, then larger values first
    axis = axis % x.ndim
    pos = jax.lax.broadcasted_iota(jnp.int32, x.shape, axis)
    *_, idx = jax.lax.sort((nan, keys + 0.0, pos), dimension=axis, num_keys=2, is_stable=True)
    return idx


def _sort(x: jax.Array, axis: int, descending: bool) -> tuple[jax.Array, jax.Array]:
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int32)
    idx = _order(x, axis, descending)
    return jnp.take_along_axis(x, idx, axis=axis), idx


def _argsort(x: jax.Array, axis: int, descending: bool) -> jax.Array:
    return _order(x, axis, descending) if x.ndim else jnp.zeros((), jnp.int32)


def sort(
    input: Any, dim: int = -1, descending: bool = False, *, stable: bool = False
) -> SortResult:
    """``(values, indices)``: ``input`` sorted along ``dim``, and where each value was.

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.sort(tp.tensor([3.0, 1.0, 2.0])).indices
        tensor([1, 2, 0])
    """
    del stable  # always stable
    static = (("axis", int(dim)), ("descending", bool(descending)))
    values, indices = call_op(_sort, "SortBackward", (input,), static)
    return SortResult(values, indices)


def argsort(input: Any, dim: int = -1, descending: bool = False, *, stable: bool = False) -> Tensor:
    """The indices that sort ``input`` along ``dim`` (``sort(...).indices``)."""
    del stable  # always stable
    static = (("axis", int(dim)), ("descending", bool(descending)))
    return call_op(_argsort, "ArgsortBackward", (input,), static)


def _topk(x: jax.Array, k: int, axis: int, largest: bool) -> tuple[jax.Array, jax.Array]:
    idx = jax.lax.slice_in_dim(_order(x, axis, largest), 0, k, axis=axis % x.ndim)
    return jnp.take_along_axis(x, idx, axis=axis), idx


def topk(
    input: Any, k: int, dim: int = -1, largest: bool = True, sorted: bool = True
) -> TopkResult:
    """``(values, indices)`` of the ``k`` largest (``largest=False``: smallest) elements
    along ``dim``, in order.

    Raises:
        RuntimeError: ``k`` outside ``[0, size of dim]``.

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.topk(tp.tensor([1.0, 5.0, 3.0]), 2)
        TopkResult(values=tensor([5., 3.]), indices=tensor([1, 2]))
    """
    del sorted  # always in order
    shape = input.shape if hasattr(input, "shape") else jnp.shape(input)
    size = shape[dim] if len(shape) else 1
    if not 0 <= int(k) <= size:
        raise RuntimeError(f"selected index k out of range: k={k}, size of dim {dim} is {size}")
    static = (("k", int(k)), ("axis", int(dim)), ("largest", bool(largest)))
    values, indices = call_op(_topk, "TopkBackward", (input,), static)
    return TopkResult(values, indices)
