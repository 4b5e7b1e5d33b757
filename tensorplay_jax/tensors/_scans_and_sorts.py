"""Scans, orderings and counts: ``cumsum``, ``cumprod``, ``logcumsumexp``, ``diff``,
``sort``, ``argsort``, ``topk``, ``median``, ``kthvalue``, ``quantile``, ``searchsorted``,
``bucketize`` (each one recorded node), and ``unique``, ``bincount`` (eager: their sizes
depend on the values; no gradient).

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
import numpy as np

from tensorplay_jax.autograd import call_op
from tensorplay_jax.tensors._host import concrete
from tensorplay_jax.tensors._tensor import Tensor

__all__ = [
    "MedianResult",
    "SortResult",
    "TopkResult",
    "argsort",
    "bincount",
    "bucketize",
    "cumprod",
    "cumsum",
    "diff",
    "kthvalue",
    "logcumsumexp",
    "median",
    "quantile",
    "searchsorted",
    "sort",
    "topk",
    "unique",
]


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


# ------------------------------------------------------------------ order statistics
class MedianResult(NamedTuple):
    """``(values, indices)`` of ``median``/``kthvalue`` along a dimension."""

    values: Tensor
    indices: Tensor


def _kth(x: jax.Array, k: int, axis: int, keepdims: bool) -> tuple[jax.Array, jax.Array]:
    idx = jax.lax.slice_in_dim(_order(x, axis, False), k, k + 1, axis=axis % x.ndim)
    values = jnp.take_along_axis(x, idx, axis=axis)
    if not keepdims:
        values, idx = jnp.squeeze(values, axis), jnp.squeeze(idx, axis)
    return values, idx


def _median_all(x: jax.Array) -> jax.Array:
    flat = x.reshape(-1)
    return _kth(flat, (flat.shape[0] - 1) // 2, 0, False)[0]


def median(input: Any, dim: int | None = None, keepdim: bool = False) -> Any:
    """The lower median (of an even count, the smaller middle value): of all elements, or
    ``(values, indices)`` along ``dim``. Which index a repeated median value reports is
    left open, as in torch.

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.median(tp.tensor([3.0, 1.0, 4.0, 2.0]))
        tensor(2.)
    """
    if dim is None:
        return call_op(_median_all, "MedianBackward", (input,))
    n = input.shape[dim]
    values, indices = call_op(
        _kth,
        "MedianBackward",
        (input,),
        (("k", (n - 1) // 2), ("axis", int(dim)), ("keepdims", bool(keepdim))),
    )
    return MedianResult(values, indices)


def kthvalue(input: Any, k: int, dim: int = -1, keepdim: bool = False) -> MedianResult:
    """``(values, indices)`` of the ``k``-th smallest element (from 1) along ``dim``."""
    n = input.shape[dim]
    if not 1 <= k <= n:
        raise RuntimeError(f"kthvalue(): selected number k out of range for dimension {dim}")
    static = (("k", int(k) - 1), ("axis", int(dim)), ("keepdims", bool(keepdim)))
    values, indices = call_op(_kth, "KthvalueBackward", (input,), static)
    return MedianResult(values, indices)


_QUANTILE_METHODS = ("linear", "lower", "higher", "midpoint", "nearest")


def _quantile(x: jax.Array, q: jax.Array, axis: Any, keepdims: bool, method: str) -> jax.Array:
    return jnp.quantile(x, q, axis=axis, keepdims=keepdims, method=method)


def quantile(
    input: Any,
    q: Any,
    dim: int | None = None,
    keepdim: bool = False,
    *,
    interpolation: str = "linear",
) -> Tensor:
    """The ``q``-th quantiles (``q`` in [0, 1], a number or a 1-d Tensor: its dimension
    first) over all elements or along ``dim``, interpolated as ``interpolation`` says."""
    if interpolation not in _QUANTILE_METHODS:
        raise RuntimeError(
            f"quantile() interpolation must be one of {', '.join(_QUANTILE_METHODS)}. Got "
            f"{interpolation}"
        )
    static = (
        ("axis", None if dim is None else int(dim)),
        ("keepdims", bool(keepdim)),
        ("method", interpolation),
    )
    return call_op(_quantile, "QuantileBackward", (input, q), static)


# ------------------------------------------------------------------ differences and scans
def _diff(x: jax.Array, prepend: Any, append: Any, n: int, axis: int) -> jax.Array:
    return jnp.diff(x, n=n, axis=axis, prepend=prepend, append=append)


def diff(input: Any, n: int = 1, dim: int = -1, prepend: Any = None, append: Any = None) -> Tensor:
    """The ``n``-th forward difference along ``dim`` (``prepend``/``append`` joined first).

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.diff(tp.tensor([1.0, 4.0, 9.0]))
        tensor([3., 5.])
    """
    static = (("n", int(n)), ("axis", int(dim)))
    return call_op(_diff, "DiffBackward", (input, prepend, append), static)


def _logcumsumexp(x: jax.Array, axis: int) -> jax.Array:
    return jax.lax.cumlogsumexp(x, axis=axis % x.ndim)


def logcumsumexp(input: Any, dim: int) -> Tensor:
    """``log(cumsum(exp(x)))`` along ``dim``, computed stably."""
    return call_op(_logcumsumexp, "LogcumsumexpBackward", (input,), (("axis", int(dim)),))


# ------------------------------------------------------------------ counting (eager)
def _host(x: Any, op: str) -> np.ndarray:
    return concrete(x._value if isinstance(x, Tensor) else x, op)


def unique(
    input: Any,
    sorted: bool = True,
    return_inverse: bool = False,
    return_counts: bool = False,
    dim: int | None = None,
) -> Any:
    """The distinct elements in ascending order (of the flattened input, or the distinct
    slices along ``dim``), with the index of each element's value (``return_inverse``)
    and each value's count (``return_counts``). Eager only; no gradient.

    Example:
        >>> import tensorplay_jax as tp
        >>> values, counts = tp.unique(tp.tensor([3, 1, 3]), return_counts=True)
        >>> values.tolist(), counts.tolist()
        ([1, 3], [1, 2])
    """
    del sorted  # always sorted, as torch's CPU kernel
    host = _host(input, "unique")
    values, inverse, counts = np.unique(host, return_inverse=True, return_counts=True, axis=dim)
    out = [Tensor(values)]
    int_type = jax.dtypes.canonicalize_dtype(np.int64)
    if return_inverse:
        shape = host.shape if dim is None else (host.shape[dim],)
        out.append(Tensor(inverse.reshape(shape).astype(int_type)))
    if return_counts:
        out.append(Tensor(counts.astype(int_type)))
    return out[0] if len(out) == 1 else tuple(out)


def bincount(input: Any, weights: Any = None, minlength: int = 0) -> Tensor:
    """How often each value ``0..max`` occurs in the 1-d non-negative integer ``input``
    (summing ``weights`` instead, when given), at least ``minlength`` long. Eager only.

    Raises:
        RuntimeError: ``input`` is not 1-d, or holds a negative value.
    """
    host = _host(input, "bincount")
    if host.ndim != 1:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if host.size and host.min() < 0:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    w = None if weights is None else _host(weights, "bincount")
    counts = np.bincount(host, weights=w, minlength=int(minlength))
    if w is None:
        counts = counts.astype(jax.dtypes.canonicalize_dtype(np.int64))
    else:
        counts = counts.astype(w.dtype if w.dtype.kind == "f" else np.float32)
    return Tensor(counts)


def _searchsorted(seq: jax.Array, values: jax.Array, side: str) -> jax.Array:
    if seq.ndim == 1:
        out = jnp.searchsorted(seq, values, side=side)
    else:
        out = jax.vmap(lambda s, v: jnp.searchsorted(s, v, side=side))(
            seq.reshape(-1, seq.shape[-1]), values.reshape(-1, values.shape[-1])
        ).reshape(values.shape)
    return out.astype(jax.dtypes.canonicalize_dtype(np.int64))


def searchsorted(
    sorted_sequence: Any,
    input: Any,
    *,
    out_int32: bool = False,
    right: bool = False,
    side: str | None = None,
    sorter: Any = None,
) -> Tensor:
    """Where each element of ``input`` would go in the innermost sorted dimension of
    ``sorted_sequence`` (``right``/``side="right"``: after equal values).

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.searchsorted(tp.tensor([1.0, 3.0, 5.0]), tp.tensor([0.0, 3.0, 6.0]))
        tensor([0, 1, 3])
    """
    if sorter is not None:
        raise NotImplementedError("searchsorted: sorter is not supported here; sort first")
    if side is not None and side not in ("left", "right"):
        raise RuntimeError(f"side can only be 'left' or 'right' but got {side}")
    if side == "left" and right:
        raise RuntimeError("side and right can't be set to opposites")
    chosen = "right" if right or side == "right" else "left"
    out = call_op(
        _searchsorted, "SearchsortedBackward", (sorted_sequence, input), (("side", chosen),)
    )
    return out.int() if out_int32 else out


def bucketize(
    input: Any, boundaries: Any, *, out_int32: bool = False, right: bool = False
) -> Tensor:
    """The bucket of each element among the sorted 1-d ``boundaries``: ``i`` with
    ``boundaries[i-1] < x <= boundaries[i]`` (``right``: ``<= x <``)."""
    return searchsorted(boundaries, input, out_int32=out_int32, right=right)
