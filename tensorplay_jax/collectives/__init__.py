"""Differentiable SPMD collectives (``shard_map``, ``pmap``, ``jit``) and their rule table.

Each takes the mapped ``axis_name`` and follows the tensorplay gradient rule: every
rank's output is its own output, so results are varying (per-rank) values and the
gradient is the transpose of the exchange. Forward and reverse mode, any order.

The table in :mod:`tensorplay_jax.collectives.rules` is the one statement of the forward
and backward rules; the blocking collectives of ``tensorplay_jax.distributed`` and the
tape collectives of ``tensorplay_jax.distributed.nn.functional`` (whose backward table
follows it) cite it.
Shapes are per rank; N is the size of the mapped axis (or the group); "stacked"
means a new leading axis of length N, rank j's piece at index j.

The rule table (function; per-rank input -> output; forward; backward), from
:mod:`tensorplay_jax.collectives.rules`, follows.
"""

from tensorplay_jax.collectives._all_gather import all_gather as all_gather
from tensorplay_jax.collectives._all_gather import all_gather_single as all_gather_single
from tensorplay_jax.collectives._all_reduce import all_reduce as all_reduce
from tensorplay_jax.collectives._all_to_all import all_to_all as all_to_all
from tensorplay_jax.collectives._all_to_all import all_to_all_single as all_to_all_single
from tensorplay_jax.collectives._broadcast import broadcast as broadcast
from tensorplay_jax.collectives._gather import gather as gather
from tensorplay_jax.collectives._reduce import reduce as reduce
from tensorplay_jax.collectives._reduce_scatter import reduce_scatter as reduce_scatter
from tensorplay_jax.collectives._scatter import scatter as scatter
from tensorplay_jax.collectives.reduce_op import ReduceOp as ReduceOp
from tensorplay_jax.collectives.rules import docstring_list as _docstring_list

__doc__ = f"""{__doc__ or ""}
{_docstring_list()}

Non-sum ops (see ``ReduceOp``): avg's gradient is the scaled sum's; max/min send
the gradient to the rank holding the extremum, the lowest such rank on ties; prod's
is as in calculus (the product of the other ranks' values, exact with zeros).
"""

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
