"""``reduce``: rank ``dst`` gets the reduction, the other ranks zeros.

Forward: y_dst = op_j x_j; y_r = 0 for r != dst.
Backward (sum): dx_r = dy_dst on every rank (dst's cotangent broadcast).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp

from tensorplay_jax.collectives._axis import axis_index, axis_size, check_rank
from tensorplay_jax.collectives.reduce_op import (
    ReduceOp,
    all_reduce_leaf,
    check_op_dtype,
    normalize_op,
)


def reduce(x: Any, dst: int, axis_name: Any, *, op: ReduceOp | str = "sum") -> Any:
    """Reduce ``x`` over the mapped axis onto rank ``dst``.

    Args:
      x: an array or pytree of arrays, this rank's input.
      dst: the destination rank, a static int in ``[0, axis size)``.
      axis_name: the mapped axis.
      op: ``"sum"`` (default), ``"avg"``, ``"max"``, ``"min"`` or ``"prod"``.

    Returns:
      On ``dst`` the reduction; on every other rank zeros (same shape and dtype).
      Gradient (sum): every rank gets ``dst``'s cotangent; the other ops' rules
      are in :class:`ReduceOp`.

    Raises:
      ValueError: ``axis_name`` is not bound, ``dst`` is out of range, or ``op`` is
        unknown.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from tensorplay_jax.collectives import reduce, spmd
      >>> f = spmd.on_ranks(lambda x: reduce(x, 1, "i"))
      >>> f(jnp.arange(4.0))
      Array([0., 6., 0., 0.], dtype=float32)
      >>> jax.grad(lambda x: (f(x) * jnp.arange(4.0)).sum())(jnp.arange(4.0))
      Array([1., 1., 1., 1.], dtype=float32)
    """
    op = normalize_op("reduce", op)
    n = axis_size("reduce", axis_name)
    dst = check_rank("reduce", "dst", dst, n)
    return jax.tree.map(partial(_reduce, dst=dst, axis_name=axis_name, op=op), x)


def _reduce(x: jax.Array, *, dst: int, axis_name: Any, op: ReduceOp) -> jax.Array:
    check_op_dtype("reduce", op, x.dtype)
    y = all_reduce_leaf(x, axis_name, op)
    return jnp.where(axis_index(axis_name) == dst, y, jnp.zeros_like(y))
