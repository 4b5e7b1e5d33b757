"""``reduce_scatter``: rank i gets slice i of the reduction of every rank's input.

Forward: y_i = op_j (x_j)[i].
Backward (sum): dx_r = stack_i dy_i on every rank (an all_gather of the cotangents).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from tensorplay_jax.collectives._axis import axis_size, check_axis, check_dim, to_varying
from tensorplay_jax.collectives.reduce_op import (
    ReduceOp,
    check_op_dtype,
    normalize_op,
    stacked_reduce,
)


def reduce_scatter(x: Any, axis_name: Any, *, op: ReduceOp | str = "sum", axis: int = 0) -> Any:
    """Reduce over ranks, then rank i keeps slice i (along ``axis``).

    Args:
      x: an array or pytree of arrays with ``x.shape[axis] == N`` (the axis size).
      axis_name: the mapped axis.
      op: ``"sum"`` (default), ``"avg"``, ``"max"``, ``"min"`` or ``"prod"``.
      axis: the axis that holds one slice per rank (default 0).

    Returns:
      ``x.shape`` without ``axis``. Gradient (sum): every rank gets all ranks'
      cotangents stacked along ``axis`` (an all-gather); see :class:`ReduceOp`.

    Raises:
      ValueError: ``axis_name`` is not bound, ``op`` is unknown, or ``x.shape[axis]``
        is not the axis size.

    Example:
      >>> import jax.numpy as jnp
      >>> from tensorplay_jax.collectives import reduce_scatter, spmd
      >>> f = spmd.on_ranks(lambda x: reduce_scatter(x, "i"))
      >>> f(jnp.ones((4, 4)) * jnp.arange(4.0))
      Array([ 0.,  4.,  8., 12.], dtype=float32)
    """
    op = normalize_op("reduce_scatter", op)
    n = axis_size("reduce_scatter", axis_name)
    return jax.tree.map(partial(_reduce_scatter, axis_name=axis_name, op=op, axis=axis, n=n), x)


def _reduce_scatter(x: jax.Array, *, axis_name: Any, op: ReduceOp, axis: int, n: int) -> jax.Array:
    x = jnp.asarray(x)
    check_op_dtype("reduce_scatter", op, x.dtype)
    axis = check_axis("reduce_scatter", "axis", axis, x.ndim)
    check_dim("reduce_scatter", x, axis, n, exact=True)
    x = to_varying(x, axis_name)
    if op in (ReduceOp.SUM, ReduceOp.AVG):
        y = lax.psum_scatter(x, axis_name, scatter_dimension=axis)
        return y / jnp.asarray(n, y.dtype) if op is ReduceOp.AVG else y
    # Non-linear ops: exchange so rank i holds every rank's slice i, then reduce
    # locally (the derivative rules of ``stacked_reduce``).
    z = lax.all_to_all(x, axis_name, split_axis=axis, concat_axis=axis, tiled=True)
    return stacked_reduce(jnp.moveaxis(z, axis, 0), op)
