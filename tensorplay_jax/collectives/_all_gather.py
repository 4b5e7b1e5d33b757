"""``all_gather`` and ``all_gather_single``: every rank gets every rank's input.

Forward: y_r = stack_j x_j (``all_gather``) or concat_j x_j (``all_gather_single``).
Backward: dx_r = sum_j (dy_j)[r], rank r's slice of every rank's cotangent summed,
i.e. a reduce_scatter(sum) of the cotangents.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from tensorplay_jax.collectives._axis import axis_size, check_axis, to_varying


def all_gather(x: Any, axis_name: Any, *, axis: int = 0) -> Any:
    """Every rank gets all ranks' inputs stacked along a new axis.

    Args:
      x: an array or pytree of arrays; every rank passes one of the same shape.
      axis_name: the mapped axis.
      axis: where the new axis of length N (the axis size) goes in the output;
        rank j's input is at index j.

    Returns:
      The stacked inputs, shape ``x.shape`` with N inserted at ``axis``. Gradient:
      rank j gets the sum over ranks of their cotangent's slice j (a reduce-scatter).

    Raises:
      ValueError: ``axis_name`` is not bound, or ``axis`` is out of range.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from tensorplay_jax.collectives import all_gather, spmd
      >>> f = spmd.on_ranks(lambda x: all_gather(x, "i"))
      >>> f(jnp.arange(4.0))[1]   # rank 1's output
      Array([0., 1., 2., 3.], dtype=float32)
      >>> jax.grad(lambda x: f(x).sum())(jnp.arange(4.0))
      Array([4., 4., 4., 4.], dtype=float32)
    """
    axis_size("all_gather", axis_name)
    return jax.tree.map(partial(_all_gather, axis_name=axis_name, axis=axis, tiled=False), x)


def all_gather_single(x: Any, axis_name: Any, *, axis: int = 0) -> Any:
    """Every rank gets all ranks' inputs concatenated along ``axis``.

    Args:
      x: an array (rank >= 1) or pytree of arrays, shape ``(k, ...)`` on every rank.
      axis_name: the mapped axis.
      axis: the axis to concatenate along (default 0).

    Returns:
      Shape ``(N*k, ...)``: rank j's input at rows ``j*k:(j+1)*k``. Gradient: rank j
      gets the sum over ranks of their cotangent's rows ``j*k:(j+1)*k``.

    Raises:
      ValueError: ``axis_name`` is not bound, ``x`` is 0-d, or ``axis`` is out of range.

    Example:
      >>> import jax.numpy as jnp
      >>> from tensorplay_jax.collectives import all_gather_single, spmd
      >>> f = spmd.on_ranks(lambda x: all_gather_single(x, "i"))
      >>> f(jnp.arange(8.0).reshape(4, 2))[1]   # rank 1's output
      Array([0., 1., 2., 3., 4., 5., 6., 7.], dtype=float32)
    """
    axis_size("all_gather_single", axis_name)
    return jax.tree.map(partial(_all_gather, axis_name=axis_name, axis=axis, tiled=True), x)


def _all_gather(x: jax.Array, *, axis_name: Any, axis: int, tiled: bool) -> jax.Array:
    x = jnp.asarray(x)
    if tiled:
        if x.ndim == 0:
            raise ValueError(
                "all_gather_single: x is 0-d; it concatenates along an axis, so pass an "
                "array of rank >= 1 (or use all_gather to stack)."
            )
        axis = check_axis("all_gather_single", "axis", axis, x.ndim)
    else:
        axis = check_axis("all_gather", "axis", axis, x.ndim, extra=1)
    return lax.all_gather(to_varying(x, axis_name), axis_name, axis=axis, tiled=tiled)
