"""``scatter``: rank i gets slice i of rank ``src``'s stacked input.

Forward: y_i = (x_src)[i].
Backward: dx_src = stack_i dy_i (src gets the stacked cotangents); dx_r = 0, r != src.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from tensorplay_jax.collectives._axis import (
    axis_index,
    axis_size,
    check_axis,
    check_dim,
    check_rank,
    to_varying,
)


def scatter(x: Any, src: int, axis_name: Any, *, axis: int = 0) -> Any:
    """Rank i gets slice i (along ``axis``) of rank ``src``'s input.

    Args:
      x: an array or pytree of arrays with ``x.shape[axis] == N`` (the axis size) on
        every rank; only ``src``'s values are used.
      src: the source rank, a static int in ``[0, axis size)``.
      axis: the axis that holds one slice per rank (default 0).
      axis_name: the mapped axis.

    Returns:
      ``x.shape`` without ``axis``. Gradient: ``src`` gets every rank's cotangent
      stacked along ``axis``; the other ranks get zeros.

    Raises:
      ValueError: ``axis_name`` is not bound, ``src`` is out of range, or
        ``x.shape[axis]`` is not the axis size.

    Example:
      >>> import jax.numpy as jnp
      >>> from tensorplay_jax.collectives import scatter, spmd
      >>> f = spmd.on_ranks(lambda x: scatter(x, 3, "i"))
      >>> f(jnp.arange(16.0).reshape(4, 4))
      Array([12., 13., 14., 15.], dtype=float32)
    """
    n = axis_size("scatter", axis_name)
    src = check_rank("scatter", "src", src, n)
    return jax.tree.map(partial(_scatter, src=src, axis_name=axis_name, axis=axis, n=n), x)


def _scatter(x: jax.Array, *, src: int, axis_name: Any, axis: int, n: int) -> jax.Array:
    x = jnp.asarray(x)
    axis = check_axis("scatter", "axis", axis, x.ndim)
    check_dim("scatter", x, axis, n, exact=True)
    mine = jnp.where(axis_index(axis_name) == src, x, jnp.zeros_like(x))
    return lax.psum_scatter(to_varying(mine, axis_name), axis_name, scatter_dimension=axis)
