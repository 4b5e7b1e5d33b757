"""Reduction ops: ``ReduceOp``, its normalisation, dtype rules, derivatives and reductions.

The one home of the reduction ops: every collective (SPMD, blocking, on the tape)
and every engine takes a ``ReduceOp`` from :func:`normalize_op` and reduces with
the functions here (differentiable over a mapped axis, plain over a mapped axis,
over a stacked axis, into numpy buffers), so the op list and the tie rule live once.
The module is public-named because the process-group engines and the tape collectives
in ``tensorplay_jax.distributed`` build on it; users import ``ReduceOp`` from
``tensorplay_jax.collectives`` (or ``tensorplay_jax.distributed``).

The sum family (sum, avg) is linear: a plain ``jax.lax`` composition whose JVP and
transpose rules JAX already has. ``max``/``min`` have no differentiation rule in
``jax.lax`` (``pmax``/``pmin``), so they get a ``custom_jvp`` with a *linear* tangent
rule built from ``psum``; JAX derives reverse mode by transposing it. ``prod`` is
``all_gather`` followed by ``jnp.prod``, whose derivative JAX knows (zeros included).
The bitwise ops (band, bor, bxor) take integer and bool inputs, which have no
derivative: ``all_gather`` followed by the bitwise reduction.
"""

from __future__ import annotations

import enum
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
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
      * ``BAND`` / ``BOR`` / ``BXOR``: bitwise and, or, xor of integer or bool inputs
        (no derivative).
    """

    SUM = "sum"
    AVG = "avg"
    MAX = "max"
    MIN = "min"
    PROD = "prod"
    PRODUCT = "prod"  # tensorplay's name of PROD (the same member)
    BAND = "band"
    BOR = "bor"
    BXOR = "bxor"


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
        if name.upper() in ReduceOp.__members__:  # an alias's name: "product"
            return ReduceOp[name.upper()]
    valid = ", ".join(repr(o.value) for o in ReduceOp)
    raise ValueError(f"{fn_name}: unknown op={op!r}; expected one of {valid} (or a ReduceOp).")


def supports_complex(op: Any) -> bool:
    """Whether the tensorplay-form collectives reduce complex tensors with ``op``: sum and
    avg (on the real and imaginary parts); tensorplay refuses the others on complex input.

    Example:
      >>> from tensorplay_jax.collectives.reduce_op import ReduceOp, supports_complex
      >>> supports_complex(ReduceOp.SUM), supports_complex("max")
      (True, False)
    """
    return normalize_op("supports_complex", op) in (ReduceOp.SUM, ReduceOp.AVG)


def check_op_dtype(fn_name: str, op: ReduceOp, dtype: Any) -> None:
    """Raise a TypeError when ``op`` is not defined for ``dtype`` (avg: inexact; max/min: real).

    Args:
      fn_name: the public function (named in the error).
      op: a normalised op.
      dtype: the input's dtype.
    """
    if op is ReduceOp.AVG and not jnp.issubdtype(dtype, jnp.inexact):
        raise TypeError(
            f"{fn_name}: op='avg' needs a floating or complex input, got dtype {dtype}; "
            "cast first or use op='sum'."
        )
    if op in (ReduceOp.MAX, ReduceOp.MIN) and jnp.issubdtype(dtype, jnp.complexfloating):
        raise TypeError(f"{fn_name}: op={op.value!r} is not defined for complex dtype {dtype}.")
    if op in _BITWISE and not (
        jnp.issubdtype(dtype, jnp.integer) or jnp.issubdtype(dtype, jnp.bool_)
    ):
        raise TypeError(
            f"{fn_name}: op={op.value!r} needs an integer or bool input, got dtype {dtype}."
        )


# --- band / bor / bxor ------------------------------------------------------------
_BITWISE = {
    ReduceOp.BAND: jnp.bitwise_and,
    ReduceOp.BOR: jnp.bitwise_or,
    ReduceOp.BXOR: jnp.bitwise_xor,
}


def _bitwise(z: jax.Array, op: ReduceOp) -> jax.Array:
    """The bitwise reduction over axis 0 of a stacked array, rank by rank."""
    out = z[0]
    for k in range(1, z.shape[0]):
        out = _BITWISE[op](out, z[k])
    return out


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


def _winner(z: jax.Array, op: ReduceOp) -> jax.Array:
    """The tie rule: the lowest index along axis 0 holding the max (or min) of ``z``."""
    return jnp.argmax(z, axis=0) if op is ReduceOp.MAX else jnp.argmin(z, axis=0)


def stacked_extremum(z: jax.Array, is_max: bool) -> jax.Array:
    """max/min over axis 0 of a stacked array, derivative to the lowest arg-extremum."""
    idx = _winner(z, ReduceOp.MAX if is_max else ReduceOp.MIN)
    return jnp.take_along_axis(z, idx[None], axis=0)[0]


def local_partials(op: ReduceOp, stacked: jax.Array, rank: int) -> jax.Array:
    """d(op over axis 0 of ``stacked``)/d(stacked[rank]), elementwise, for max, min and prod.

    max/min: 1 where ``rank`` is the lowest rank holding the extremum, else 0.
    prod: the product of the other ranks' values (no division, exact with zeros).
    """
    if op is ReduceOp.PROD:
        others = stacked.at[rank].set(jnp.ones_like(stacked[rank]))
        return jnp.prod(others, axis=0)
    return (_winner(stacked, op) == rank).astype(stacked.dtype)


def stacked_reduce(z: jax.Array, op: ReduceOp) -> jax.Array:
    """Reduce a stacked (N, ...) array over axis 0 with ``op`` (rules as in ReduceOp)."""
    if op is ReduceOp.SUM:
        return jnp.sum(z, axis=0)
    if op is ReduceOp.AVG:
        return jnp.sum(z, axis=0) / z.shape[0]
    if op is ReduceOp.PROD:
        return jnp.prod(z, axis=0)
    if op in _BITWISE:
        return _bitwise(z, op)
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
    if op in _BITWISE:
        return _bitwise(lax.all_gather(to_varying(x, axis_name), axis_name), op)
    return _pextremum(x, axis_name, op is ReduceOp.MAX)


def lax_reduce(x: jax.Array, axis_name: Any, op: ReduceOp) -> jax.Array:
    """The reduction over ``axis_name`` as plain ``jax.lax`` collectives (no derivative rules).

    The result keeps ``x``'s dtype (prod of small integers wraps, as in numpy's ufuncs).
    """
    if op is ReduceOp.SUM:
        return lax.psum(x, axis_name)
    if op is ReduceOp.AVG:
        return lax.psum(x, axis_name) / jnp.asarray(lax.axis_size(axis_name), x.dtype)
    if op is ReduceOp.MAX:
        return lax.pmax(x, axis_name)
    if op is ReduceOp.MIN:
        return lax.pmin(x, axis_name)
    if op in _BITWISE:
        return _bitwise(lax.all_gather(x, axis_name), op)
    return jnp.prod(lax.all_gather(x, axis_name), axis=0).astype(x.dtype)


_UFUNC = {
    ReduceOp.SUM: np.add,
    ReduceOp.AVG: np.add,
    ReduceOp.MAX: np.maximum,
    ReduceOp.MIN: np.minimum,
    ReduceOp.PROD: np.multiply,
    ReduceOp.BAND: np.bitwise_and,
    ReduceOp.BOR: np.bitwise_or,
    ReduceOp.BXOR: np.bitwise_xor,
}


# Half-precision sums: NumPy converts each float16 element to float32 and back in scalar
# code (many times float32's cost); one XLA program does the same arithmetic with
# vector conversions. It rounds to the half type after every addition and after the
# division, as NumPy does, so both give the same bits (tests/collectives/test_reduce_into.py).
_HALF = (np.dtype(np.float16), np.dtype(jnp.bfloat16))
XLA_HALF_MIN_SIZE = 1 << 16  # elements; below it NumPy's loop costs less than a dispatch


@partial(jax.jit, static_argnames=("divide_by",))
def _half_sum(parts: tuple[jax.Array, ...], divide_by: int) -> jax.Array:
    dtype = parts[0].dtype
    acc = parts[0]
    for p in parts[1:]:
        acc = (acc.astype(jnp.float32) + p.astype(jnp.float32)).astype(dtype)
    if divide_by:
        acc = (acc.astype(jnp.float32) / jnp.float32(divide_by)).astype(dtype)
    return acc


def reduce_into(out: np.ndarray, parts: list[np.ndarray], op: ReduceOp, n: int) -> None:
    """``out = op(parts...)`` in the given order; avg divides the sum by ``n``.

    A large float16 / bfloat16 sum or average runs as one XLA program (see
    ``_half_sum``); everything else, and that too below ``XLA_HALF_MIN_SIZE``
    elements, is :func:`reduce_into_numpy`.
    """
    if (
        op in (ReduceOp.SUM, ReduceOp.AVG)
        and out.dtype in _HALF
        and len(parts) > 1
        and out.size >= XLA_HALF_MIN_SIZE
    ):
        divide_by = n if op is ReduceOp.AVG else 0
        np.copyto(out, np.asarray(_half_sum(tuple(parts), divide_by=divide_by)))
        return
    reduce_into_numpy(out, parts, op, n)


def reduce_into_numpy(out: np.ndarray, parts: list[np.ndarray], op: ReduceOp, n: int) -> None:
    """``out = op(parts...)`` with NumPy's ufuncs, in the given order; avg divides the sum
    by ``n`` (the reference of :func:`reduce_into`)."""
    uf = _UFUNC[op]
    if len(parts) == 1:
        np.copyto(out, parts[0])
    else:
        uf(parts[0], parts[1], out=out)
        for p in parts[2:]:
            uf(out, p, out=out)
    if op is ReduceOp.AVG:
        np.divide(out, n, out=out, casting="unsafe")
