"""Differentiable SPMD collectives for ``jax.shard_map``, ``jax.pmap`` and ``jit``.

Each takes the mapped ``axis_name`` and follows the tensorplay gradient rule: every
rank's output is its own output, so results are varying (per-rank) values and the
gradient is the transpose of the exchange. Forward and reverse mode, any order.
"""

from tensorplay_jax.collectives._all_gather import all_gather as all_gather
from tensorplay_jax.collectives._all_gather import all_gather_single as all_gather_single
from tensorplay_jax.collectives._all_reduce import all_reduce as all_reduce
from tensorplay_jax.collectives._all_to_all import all_to_all as all_to_all
from tensorplay_jax.collectives._all_to_all import all_to_all_single as all_to_all_single
from tensorplay_jax.collectives._broadcast import broadcast as broadcast
from tensorplay_jax.collectives._gather import gather as gather
from tensorplay_jax.collectives._reduce import reduce as reduce
from tensorplay_jax.collectives._reduce_op import ReduceOp as ReduceOp
from tensorplay_jax.collectives._reduce_scatter import reduce_scatter as reduce_scatter
from tensorplay_jax.collectives._scatter import scatter as scatter

__all__ = [
    "ReduceOp",
    "all_gather",
    "all_gather_single",
    "all_reduce",
    "all_to_all",
    "all_to_all_single",
    "broadcast",
    "gather",
    "reduce",
    "reduce_scatter",
    "scatter",
]
