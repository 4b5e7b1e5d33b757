"""Axis helpers and argument validation shared by every collective.

Each public collective validates here, before anything is traced, and every error
names the function, the argument, the bad value and the fix.
"""

from __future__ import annotations

import operator
from collections.abc import Hashable
from typing import Any

import jax
from jax import lax


def axis_size(fn_name: str, axis_name: Any) -> int:
    """The size of the bound mapped axis ``axis_name``, or a clear ValueError."""
    if isinstance(axis_name, (tuple, list)) or not isinstance(axis_name, Hashable):
        raise TypeError(
            f"{fn_name}: axis_name must be a single mapped axis name, got {axis_name!r}."
        )
    try:
        return int(lax.axis_size(axis_name))
    except NameError:
        raise ValueError(
            f"{fn_name}: axis_name={axis_name!r} is not bound here; call it inside "
            f"jax.shard_map(..., mesh=...) with a mesh axis {axis_name!r}, or inside "
            f"jax.pmap(..., axis_name={axis_name!r})."
        ) from None


def axis_index(axis_name: Any) -> jax.Array:
    return lax.axis_index(axis_name)


def to_varying(x: jax.Array, axis_name: Any) -> jax.Array:
    """Mark ``x`` as varying over ``axis_name`` (one value per rank); no-op if it already is.

    Under ``shard_map(check_vma=True)`` a ``psum`` result is typed invariant; JAX then
    transposes it as one logical value. Our collectives follow the per-rank
    (tensorplay) rule, so their results are varying; the transpose of this cast is the
    ``psum`` of the per-rank cotangents. Without vma checking (``check_vma=False``,
    ``pmap``) the cast is the identity.
    """
    if axis_name in varying_axes(x):
        return x
    return lax.pcast(x, axis_name, to="varying")


def varying_axes(x: jax.Array) -> frozenset:
    """The mapped axes over which ``x`` is typed varying (empty when vma is not checked)."""
    mat = getattr(jax.typeof(x), "manual_axis_type", None)
    return getattr(mat, "varying", None) or frozenset()


def check_rank(fn_name: str, arg: str, value: Any, n: int) -> int:
    """Validate a source/destination rank against the axis size ``n``."""
    if isinstance(value, bool):
        raise TypeError(f"{fn_name}: {arg} must be an int rank, got {value!r}.")
    try:
        r = operator.index(value)
    except TypeError:
        raise TypeError(
            f"{fn_name}: {arg} must be a static Python int rank, got {type(value).__name__} "
            f"{value!r}."
        ) from None
    if not 0 <= r < n:
        raise ValueError(
            f"{fn_name}: {arg}={r} is out of range for an axis of size {n}; "
            f"expected 0 <= {arg} < {n}."
        )
    return r


def check_axis(fn_name: str, arg: str, axis: int, ndim: int, *, extra: int = 0) -> int:
    """Normalise a (possibly negative) array axis for an array of rank ``ndim`` (+``extra``)."""
    size = ndim + extra
    try:
        a = operator.index(axis)
    except TypeError:
        raise TypeError(f"{fn_name}: {arg} must be an int, got {axis!r}.") from None
    if not -size <= a < size:
        raise ValueError(
            f"{fn_name}: {arg}={a} is out of range for an array of rank {ndim}"
            + (f" (valid: {-size}..{size - 1})." if size else " (a 0-d array has no axes).")
        )
    return a % size


def check_dim(fn_name: str, x: jax.Array, axis: int, n: int, *, exact: bool) -> None:
    """Check ``x.shape[axis]`` equals (``exact``) or is divisible by the axis size ``n``."""
    d = x.shape[axis]
    if exact and d != n:
        raise ValueError(
            f"{fn_name}: x.shape[{axis}]={d} must equal the axis size {n} (one slice per "
            f"rank); got x of shape {tuple(x.shape)}."
        )
    if not exact and d % n:
        raise ValueError(
            f"{fn_name}: x.shape[{axis}]={d} is not divisible by the axis size {n}; "
            f"got x of shape {tuple(x.shape)}."
        )
