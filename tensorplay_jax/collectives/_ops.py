"""Reduction ops (`ReduceOp`) and their differentiable all-reduce over a mapped axis.

The sum family (sum, avg) is linear: a plain ``jax.lax`` composition whose JVP and
transpose rules JAX already has. ``max``/``min`` have no differentiation rule in
``jax.lax`` (``pmax``/``pmin``), so they get a ``custom_jvp`` with a *linear* tangent
rule built from ``psum``; JAX derives reverse mode by transposing it. ``prod`` is
``all_gather`` followed by ``jnp.prod``, whose derivative JAX knows (zeros included).
"""

from __future__ import annotations

import enum
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from tensorplay_jax.collectives._axis import axis_index, to_varying


class ReduceOp(enum.StrEnum):
    """Reduction applied by ``all_reduce``, ``reduce`` and ``reduce_scatter``.

    A ``StrEnum``: ``ReduceOp.SUM == "sum"``, so either spelling works.

    Derivatives:
      * ``SUM``: the sum of the per-rank cotangents (the tensorplay rule).
      * ``AVG``: ``SUM``'s, divided by the axis size.
      * ``MAX`` / ``MIN``: the whole cotangent goes to the rank holding the
        extremum; on ties, to the **lowest** such rank (deterministic, like
        ``jnp.argmax``). NaN inputs give no rank a gradient.
      * ``PROD``: as in calculus, the product of the other ranks' values (exact
        with zeros, no division).
    """

    SUM = "sum"
    AVG = "avg"
    MAX = "max"
    MIN = "min"
    PROD = "prod"


def normalize_op(fn_name: str, op: Any) -> ReduceOp:
    """Turn ``op`` (a ReduceOp, its value or name in any case) into a ReduceOp, or raise."""
    if isinstance(op, ReduceOp):
        return op
    name = getattr(op, "name", op)
    if isinstance(name, str):
        try:
            return ReduceOp(name.lower())
        except ValueError:
            pass
    valid = ", ".join(repr(o.value) for o in ReduceOp)
    raise ValueError(f"{fn_name}: unknown op={op!r}; expected one of {valid} (or a ReduceOp).")


def check_op_dtype(fn_name: str, op: ReduceOp, x: jax.Array) -> None:
    if op is ReduceOp.AVG and not jnp.issubdtype(x.dtype, jnp.inexact):
        raise TypeError(
            f"{fn_name}: op='avg' needs a floating or complex input, got dtype {x.dtype}; "
            "cast first or use op='sum'."
        )
    if op in (ReduceOp.MAX, ReduceOp.MIN) and jnp.issubdtype(x.dtype, jnp.complexfloating):
        raise TypeError(f"{fn_name}: op={op.value!r} is not defined for complex dtype {x.dtype}.")


# --- max / min ------------------------------------------------------------------
# y = max_r x_r (elementwise). With w the lowest rank r attaining the maximum,
# dy = dx_w: the tangent is psum(where(rank == w, dx, 0)), linear in dx, so its
# transpose (reverse mode) is: rank r gets where(r == w, psum(ct), 0).


@partial(jax.custom_jvp, nondiff_argnums=(1, 2))
def _pextremum(x: jax.Array, axis_name: Any, is_max: bool) -> jax.Array:
    y = lax.pmax(x, axis_name) if is_max else lax.pmin(x, axis_name)
    return to_varying(y, axis_name)


@_pextremum.defjvp
def _pextremum_jvp(axis_name, is_max, primals, tangents):
    (x,), (dx,) = primals, tangents
    y = _pextremum(x, axis_name, is_max)
    rank = axis_index(axis_name)
    n = lax.axis_size(axis_name)
    candidate = jnp.where(x == y, rank, n).astype(jnp.int32)
    winner = lax.pmin(candidate, axis_name)
    dy = lax.psum(jnp.where(rank == winner, dx, jnp.zeros_like(dx)), axis_name)
    return y, to_varying(dy, axis_name)


def stacked_extremum(z: jax.Array, is_max: bool) -> jax.Array:
    """max/min over axis 0 of a stacked array, derivative to the lowest arg-extremum."""
    idx = jnp.argmax(z, axis=0) if is_max else jnp.argmin(z, axis=0)
    return jnp.take_along_axis(z, idx[None], axis=0)[0]


def stacked_reduce(z: jax.Array, op: ReduceOp) -> jax.Array:
    """Reduce a stacked (N, ...) array over axis 0 with ``op`` (rules as in ReduceOp)."""
    if op is ReduceOp.SUM:
        return jnp.sum(z, axis=0)
    if op is ReduceOp.AVG:
        return jnp.sum(z, axis=0) / z.shape[0]
    if op is ReduceOp.PROD:
        return jnp.prod(z, axis=0)
    return stacked_extremum(z, op is ReduceOp.MAX)


def all_reduce_leaf(x: jax.Array, axis_name: Any, op: ReduceOp) -> jax.Array:
    """The reduction of ``x`` over ``axis_name`` on every rank, as a varying value."""
    if op is ReduceOp.SUM:
        return to_varying(lax.psum(x, axis_name), axis_name)
    if op is ReduceOp.AVG:
        n = lax.axis_size(axis_name)
        return to_varying(lax.psum(x, axis_name), axis_name) / jnp.asarray(n, x.dtype)
    if op is ReduceOp.PROD:
        return jnp.prod(lax.all_gather(to_varying(x, axis_name), axis_name), axis=0)
    return _pextremum(x, axis_name, op is ReduceOp.MAX)
