"""``broadcast``: every rank gets rank ``src``'s value.

Forward: y_r = x_src.
Backward: dx_src = sum_j dy_j; dx_r = 0 for r != src.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from tensorplay_jax.collectives._axis import axis_index, axis_size, check_rank, to_varying


def broadcast(x: Any, src: int, axis_name: Any) -> Any:
    """Every rank gets rank ``src``'s ``x``.

    Args:
      x: an array or pytree of arrays; every rank passes one of the same shape.
      src: the source rank, a static int in ``[0, axis size)``.
      axis_name: the mapped axis.

    Returns:
      ``src``'s ``x`` on every rank (varying over ``axis_name``). Gradient: ``src``
      gets the sum of every rank's cotangent; the other ranks get zeros.

    Raises:
      ValueError: ``axis_name`` is not bound, or ``src`` is out of range.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from tensorplay_jax.collectives import broadcast, spmd
      >>> f = spmd.on_ranks(lambda x: broadcast(x, 2, "i"))
      >>> x = jnp.arange(8.0).reshape(4, 2)   # rank r's x is row r
      >>> f(x)
      Array([[4., 5.],
             [4., 5.],
             [4., 5.],
             [4., 5.]], dtype=float32)
      >>> jax.grad(lambda x: f(x).sum())(x)
      Array([[0., 0.],
             [0., 0.],
             [4., 4.],
             [0., 0.]], dtype=float32)
    """
    n = axis_size("broadcast", axis_name)
    src = check_rank("broadcast", "src", src, n)
    return jax.tree.map(partial(broadcast_leaf, src=src, axis_name=axis_name), x)


def broadcast_leaf(x: jax.Array, *, src: int, axis_name: Any) -> jax.Array:
    # A masked psum: JAX's CPU backend has no lowering for a one-to-all broadcast, and
    # masking (not multiplying) keeps NaN/inf on other ranks out of the result.
    mine = jnp.where(axis_index(axis_name) == src, x, jnp.zeros_like(x))
    return to_varying(lax.psum(mine, axis_name), axis_name)
