"""``gather``: rank ``dst`` gets every rank's input stacked, the other ranks zeros.

Forward: y_dst = stack_j x_j; y_r = 0 for r != dst.
Backward: dx_r = (dy_dst)[r], rank r gets slice r of dst's cotangent.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp

from tensorplay_jax.collectives._all_gather import _all_gather
from tensorplay_jax.collectives._axis import axis_index, axis_size, check_rank


def gather(x: Any, dst: int, axis_name: Any, *, axis: int = 0) -> Any:
    """Rank ``dst`` gets all ranks' inputs stacked along a new axis; others get zeros.

    Args:
      x: an array or pytree of arrays; every rank passes one of the same shape.
      dst: the destination rank, a static int in ``[0, axis size)``.
      axis_name: the mapped axis.
      axis: where the new axis of length N goes in the output (default 0).

    Returns:
      Shape ``x.shape`` with N inserted at ``axis``: the stacked inputs on ``dst``,
      zeros elsewhere. Gradient: rank r gets slice r of ``dst``'s cotangent.

    Raises:
      ValueError: ``axis_name`` is not bound, ``dst`` or ``axis`` is out of range.

    Example:
      >>> import jax.numpy as jnp
      >>> from tensorplay_jax.collectives import gather, spmd
      >>> f = spmd.on_ranks(lambda x: gather(x, 0, "i"))
      >>> f(jnp.arange(4.0))
      Array([[0., 1., 2., 3.],
             [0., 0., 0., 0.],
             [0., 0., 0., 0.],
             [0., 0., 0., 0.]], dtype=float32)
    """
    n = axis_size("gather", axis_name)
    dst = check_rank("gather", "dst", dst, n)
    return jax.tree.map(partial(_gather, dst=dst, axis_name=axis_name, axis=axis), x)


def _gather(x: jax.Array, *, dst: int, axis_name: Any, axis: int) -> jax.Array:
    try:
        y = _all_gather(x, axis_name=axis_name, axis=axis, tiled=False)
    except ValueError as e:
        raise ValueError(str(e).replace("all_gather:", "gather:", 1)) from None
    return jnp.where(axis_index(axis_name) == dst, y, jnp.zeros_like(y))
