"""Reductions (sum, mean, var, std, prod, max, min, argmax, logsumexp, any, all) as recorded nodes.

``dim`` takes an int, a tuple of ints or None (all dimensions); ``axis`` is
accepted as an alias, as tensorplay does. ``max``/``min`` follow tensorplay:
no ``dim`` reduces everything (ties share the gradient); an int ``dim``
returns ``(values, indices)`` and the gradient goes to the selected index; a
Tensor argument means the elementwise maximum/minimum.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from tensorplay_jax.autograd import call_op
from tensorplay_jax.tensors import _ops, _sparse_ops
from tensorplay_jax.tensors._sparse import SparseTensor
from tensorplay_jax.tensors._tensor import Tensor


class MinMaxResult(NamedTuple):
    """``(values, indices)`` of ``max``/``min`` along a dimension."""

    values: Tensor
    indices: Tensor


def _dims(fn: str, dim: Any, axis: Any) -> int | tuple[int, ...] | None:
    if axis is not None:
        if dim is not None:
            raise TypeError(f"tp.{fn}: pass dim or axis, not both")
        dim = axis
    if dim is None:
        return None
    if isinstance(dim, list | tuple):
        return tuple(int(d) for d in dim)
    return int(dim)


def _reduce(jfn: Any, name: str, x: Any, dim: Any, keepdim: bool, **static: Any) -> Tensor:
    kw = (("axis", dim), ("keepdims", builtins.bool(keepdim)), *sorted(static.items()))
    # sum and mean need only the input's shape for their gradient
    return call_op(jfn, name, (x,), kw, saves=name not in ("SumBackward", "MeanBackward"))


def sum(input: Any, dim: Any = None, keepdim: bool = False, *, axis: Any = None) -> Tensor:
    """Sum over ``dim`` (all dimensions when None).

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.sum(tp.ones((2, 3)), dim=1)
        tensor([3., 3.])
    """
    if type(input) is SparseTensor:
        if keepdim:
            raise TypeError("sum: keepdim=True is not supported for sparse tensors")
        return _sparse_ops.sum(input, dim if axis is None else axis)
    return _reduce(jnp.sum, "SumBackward", input, _dims("sum", dim, axis), keepdim)


def mean(input: Any, dim: Any = None, keepdim: bool = False, *, axis: Any = None) -> Tensor:
    """Mean over ``dim`` (all dimensions when None)."""
    return _reduce(jnp.mean, "MeanBackward", input, _dims("mean", dim, axis), keepdim)


def _ddof(public: str, dim: Any, unbiased: Any, correction: Any) -> tuple[Any, int]:
    """torch's two forms of a moment's divisor: ``unbiased`` (a bool: ``correction`` 1 or
    0, also as the only positional argument, in ``dim``'s place) or ``correction``;
    returns ``(dim, ddof)``."""
    if isinstance(dim, bool):  # x.var(False): the unbiased flag, over every element
        dim, unbiased = None, dim
    if unbiased is not None and correction is not None:
        raise TypeError(f"tp.{public}: pass unbiased or correction, not both")
    if unbiased is not None:
        return dim, 1 if unbiased else 0
    return dim, 1 if correction is None else int(correction)


def _moment_op(public: str, jfn: Any, node: str, doc: str) -> Callable[..., Tensor]:
    """The public moment ``public(input, dim, unbiased, keepdim, *, correction, axis)``
    (var, std), with torch's two forms: ``unbiased`` (a bool: ``correction`` 1 or 0, also
    as the only positional argument) or ``correction``."""

    def op(
        input: Any,
        dim: Any = None,
        unbiased: bool | None = None,
        keepdim: bool = False,
        *,
        correction: Any = None,
        axis: Any = None,
    ) -> Tensor:
        dim, ddof = _ddof(public, dim, unbiased, correction)
        return _reduce(jfn, node, input, _dims(public, dim, axis), keepdim, ddof=ddof)

    op.__name__ = op.__qualname__ = public
    op.__doc__ = doc
    return op


var = _moment_op(
    "var",
    jnp.var,
    "VarBackward",
    "Variance over ``dim``, dividing by ``N - correction`` (tensorplay's default 1).",
)
std = _moment_op(
    "std",
    jnp.std,
    "StdBackward",
    "Standard deviation over ``dim``, dividing by ``N - correction``.",
)


def prod(input: Any, dim: Any = None, keepdim: bool = False, *, axis: Any = None) -> Tensor:
    """Product over ``dim``."""
    return _reduce(jnp.prod, "ProdBackward", input, _dims("prod", dim, axis), keepdim)


def amax(input: Any, dim: Any = None, keepdim: bool = False) -> Tensor:
    """Max over ``dim`` (int, tuple or None); ties share the gradient equally."""
    return _reduce(jnp.max, "AmaxBackward", input, _dims("amax", dim, None), keepdim)


def amin(input: Any, dim: Any = None, keepdim: bool = False) -> Tensor:
    """Min over ``dim`` (int, tuple or None); ties share the gradient equally."""
    return _reduce(jnp.min, "AminBackward", input, _dims("amin", dim, None), keepdim)


def _select(x: jax.Array, axis: int, keepdims: bool, arg: Any) -> tuple[jax.Array, jax.Array]:
    idx = arg(x, axis=axis, keepdims=True)
    values = jnp.take_along_axis(x, idx, axis=axis)
    if not keepdims:
        values, idx = jnp.squeeze(values, axis), jnp.squeeze(idx, axis)
    return values, idx


def _max_dim(x: jax.Array, axis: int, keepdims: bool) -> tuple[jax.Array, jax.Array]:
    return _select(x, axis, keepdims, jnp.argmax)


def _min_dim(x: jax.Array, axis: int, keepdims: bool) -> tuple[jax.Array, jax.Array]:
    return _select(x, axis, keepdims, jnp.argmin)


def _extremum(
    fn: str, input: Any, dim: Any, keepdim: bool, axis: Any, elementwise: Any, whole: Any, pick: Any
) -> Any:
    """``max``/``min``: elementwise with a Tensor ``dim``, ``(values, indices)`` with an int."""
    if isinstance(dim, Tensor | jax.Array):
        return elementwise(input, dim)
    d = _dims(fn, dim, axis)
    if d is None or isinstance(d, tuple):
        return whole(input, d, keepdim)
    node = f"{fn.capitalize()}Backward"
    v, i = call_op(pick, node, (input,), (("axis", d), ("keepdims", keepdim)))
    return MinMaxResult(v, i)


def max(input: Any, dim: Any = None, keepdim: bool = False, *, axis: Any = None) -> Any:
    """Max of all elements, ``(values, indices)`` along an int ``dim``, or elementwise max.

    Example:
        >>> import tensorplay_jax as tp
        >>> x = tp.tensor([[1.0, 5.0], [7.0, 2.0]])
        >>> x.max()
        tensor(7.)
        >>> x.max(dim=1).indices
        tensor([1, 0])
    """
    return _extremum("max", input, dim, keepdim, axis, _ops.maximum, amax, _max_dim)


def min(input: Any, dim: Any = None, keepdim: bool = False, *, axis: Any = None) -> Any:
    """Min of all elements, ``(values, indices)`` along an int ``dim``, or elementwise min."""
    return _extremum("min", input, dim, keepdim, axis, _ops.minimum, amin, _min_dim)


def argmax(input: Any, dim: int | None = None, keepdim: bool = False) -> Tensor:
    """Index of the maximum along ``dim`` (of the flattened Tensor when None)."""
    return _reduce(jnp.argmax, "ArgmaxBackward", input, _dims("argmax", dim, None), keepdim)


def argmin(input: Any, dim: int | None = None, keepdim: bool = False) -> Tensor:
    """Index of the minimum along ``dim`` (of the flattened Tensor when None)."""
    return _reduce(jnp.argmin, "ArgminBackward", input, _dims("argmin", dim, None), keepdim)


def logsumexp(input: Any, dim: Any, keepdim: bool = False) -> Tensor:
    """``log(sum(exp(x)))`` over ``dim``, computed stably."""
    return _reduce(
        jax.nn.logsumexp, "LogsumexpBackward", input, _dims("logsumexp", dim, None), keepdim
    )


def any(input: Any, dim: Any = None, keepdim: bool = False) -> Tensor:
    """Whether any element (over ``dim``) is true."""
    return _reduce(jnp.any, "AnyBackward", input, _dims("any", dim, None), keepdim)


def all(input: Any, dim: Any = None, keepdim: bool = False) -> Tensor:
    """Whether every element (over ``dim``) is true."""
    return _reduce(jnp.all, "AllBackward", input, _dims("all", dim, None), keepdim)


def _count_nonzero(x: jax.Array, axis: Any) -> jax.Array:
    return jnp.count_nonzero(x, axis=axis).astype(jax.dtypes.canonicalize_dtype(jnp.int64))


def count_nonzero(input: Any, dim: Any = None) -> Tensor:
    """How many elements (over ``dim``) are not zero (an integer Tensor)."""
    return call_op(
        _count_nonzero,
        "CountNonzeroBackward",
        (input,),
        (("axis", _dims("count_nonzero", dim, None)),),
    )


def nansum(input: Any, dim: Any = None, keepdim: bool = False) -> Tensor:
    """Sum over ``dim``, NaN taken as 0."""
    return _reduce(jnp.nansum, "NansumBackward", input, _dims("nansum", dim, None), keepdim)


def nanmean(input: Any, dim: Any = None, keepdim: bool = False) -> Tensor:
    """Mean over ``dim`` of the elements that are not NaN."""
    return _reduce(jnp.nanmean, "NanmeanBackward", input, _dims("nanmean", dim, None), keepdim)


def _moments(x: jax.Array, axis: Any, keepdims: bool, ddof: int, root: bool) -> Any:
    var = jnp.var(x, axis=axis, keepdims=keepdims, ddof=ddof)
    return (jnp.sqrt(var) if root else var), jnp.mean(x, axis=axis, keepdims=keepdims)


def _moments_op(public: str, root: bool) -> Callable[..., tuple[Tensor, Tensor]]:
    def op(
        input: Any,
        dim: Any = None,
        unbiased: bool | None = None,
        keepdim: bool = False,
        *,
        correction: Any = None,
    ) -> tuple[Tensor, Tensor]:
        dim, ddof = _ddof(public, dim, unbiased, correction)
        static = (
            ("axis", _dims(public, dim, None)),
            ("keepdims", builtins.bool(keepdim)),
            ("ddof", ddof),
            ("root", root),
        )
        out = call_op(_moments, f"{public.title().replace('_', '')}Backward", (input,), static)
        return tuple(out)  # type: ignore[return-value]

    op.__name__ = op.__qualname__ = public
    op.__doc__ = (
        f"``({'std' if root else 'var'}, mean)`` over ``dim`` in one pass (``unbiased`` or "
        "``correction`` as ``var``'s)."
    )
    return op


var_mean = _moments_op("var_mean", root=False)
std_mean = _moments_op("std_mean", root=True)
