"""``on_ranks``: one rank's function run on N devices, the setting of every collective's example.

Each collective's example runs its function as a rank of a 1-D mesh axis ``"i"`` with
``jax.shard_map``; this module is that one setting, so the examples show the
collective and not the mesh. In a program of your own, write the ``shard_map``
(or ``pmap``) that fits your data; the function's body shows what each part is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

__all__ = ["on_ranks"]


def on_ranks(fn: Callable[..., Any], n: int = 4, axis_name: str = "i") -> Callable[..., Any]:
    """``fn`` as the program of each of ``n`` ranks along the mesh axis ``axis_name``.

    Rank r's input is ``x[r]`` of each argument ``x`` (a leading axis of length ``n``),
    and its output is ``y[r]`` of the result, as the collectives' rules write
    ``x_r`` and ``y_r``. It is ``jax.shard_map`` over a 1-D mesh of the first ``n``
    devices, each rank's block of one row taken apart and put back; JAX
    differentiates it (``jax.grad``) and compiles it (``jax.jit``).

    Args:
      fn: one rank's function; it calls collectives with ``axis_name``.
      n: the number of ranks (devices; at most ``jax.device_count()``).
      axis_name: the name of the mesh axis the ranks lie along.

    Returns:
      The SPMD function: arguments and results with a leading axis of ``n`` ranks.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from tensorplay_jax.collectives.spmd import on_ranks
      >>> f = on_ranks(lambda x: x * jax.lax.axis_index("i"))   # rank r scales its x by r
      >>> f(jnp.ones((4, 2)))
      Array([[0., 0.],
             [1., 1.],
             [2., 2.],
             [3., 3.]], dtype=float32)
    """

    def rank(*args: Any) -> Any:
        out = fn(*jax.tree.map(lambda x: x[0], args))  # this rank's block of one row: x[r]
        return jax.tree.map(lambda y: y[None], out)

    mesh = jax.make_mesh((n,), (axis_name,), axis_types=(AxisType.Auto,))
    return jax.shard_map(rank, mesh=mesh, in_specs=P(axis_name), out_specs=P(axis_name))
