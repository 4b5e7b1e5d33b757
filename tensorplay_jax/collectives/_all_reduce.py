"""``all_reduce``: every rank gets the reduction over the axis.

Forward: y_r = op_j x_j on every rank r.
Backward (sum, the tensorplay rule, every rank's y its own output):
  dx_r = sum_j dy_j, i.e. an all_reduce(sum) of the cotangents.
The other ops' rules are in ``reduce_op.ReduceOp``.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax

from tensorplay_jax.collectives._axis import axis_size
from tensorplay_jax.collectives.reduce_op import (
    ReduceOp,
    all_reduce_leaf,
    check_op_dtype,
    normalize_op,
)


def all_reduce(x: Any, axis_name: Any, *, op: ReduceOp | str = "sum") -> Any:
    """Reduce ``x`` over the mapped axis; every rank gets the result.

    Args:
      x: an array, or a pytree of arrays, this rank's input.
      axis_name: the mapped axis (a ``shard_map`` mesh axis or a ``pmap`` axis name).
      op: ``"sum"`` (default), ``"avg"``, ``"max"``, ``"min"`` or ``"prod"``
        (or a :class:`ReduceOp`).

    Returns:
      The reduction, same shape and dtype as ``x``, varying over ``axis_name``: one
      value per rank, so it leaves ``shard_map`` through a mapped ``out_specs``.
      Its gradient is the all-reduce (sum) of the per-rank cotangents; see
      :class:`ReduceOp` for the other ops (max/min: ties go to the lowest rank).

    Raises:
      ValueError: ``axis_name`` is not bound, or ``op`` is unknown.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from tensorplay_jax.collectives import all_reduce, spmd
      >>> f = spmd.on_ranks(lambda x: all_reduce(x, "i"))
      >>> f(jnp.arange(4.0))
      Array([6., 6., 6., 6.], dtype=float32)
      >>> jax.grad(lambda x: (f(x) * jnp.arange(4.0)).sum())(jnp.arange(4.0))
      Array([6., 6., 6., 6.], dtype=float32)
    """
    op = normalize_op("all_reduce", op)
    axis_size("all_reduce", axis_name)
    return jax.tree.map(partial(_all_reduce, axis_name=axis_name, op=op), x)


def _all_reduce(x: jax.Array, *, axis_name: Any, op: ReduceOp) -> jax.Array:
    check_op_dtype("all_reduce", op, x.dtype)
    return all_reduce_leaf(x, axis_name, op)
