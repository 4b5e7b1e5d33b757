"""Differentiable SPMD collectives (``shard_map``, ``pmap``, ``jit``) and their rule table.

Each takes the mapped ``axis_name`` and follows the tensorplay gradient rule: every
rank's output is its own output, so results are varying (per-rank) values and the
gradient is the transpose of the exchange. Forward and reverse mode, any order.

This table is the one statement of the forward and backward rules; the blocking
collectives of ``tensorplay_jax.distributed`` and the tape collectives of
``tensorplay_jax.distributed.nn.functional`` (whose backward table follows it) cite it.
Shapes are per rank; N is the size of the mapped axis (or the group); "stacked"
means a new leading axis of length N, rank j's piece at index j.

The rule table (function; per-rank input -> output; forward; backward):

- ``all_reduce(x, axis_name, op='sum')``, ``(...) -> (...)``

  - forward: every rank gets the reduction
  - backward: all_reduce(sum) of the gradient
- ``broadcast(x, src, axis_name)``, ``(...) -> (...)``

  - forward: every rank gets src's x
  - backward: sum of gradients to src; zero elsewhere
- ``reduce(x, dst, axis_name, op='sum')``, ``(...) -> (...)``

  - forward: dst gets the reduction, other ranks zeros
  - backward: dst's gradient broadcast to every rank
- ``gather(x, dst, axis_name)``, ``(...) -> (N, ...)``

  - forward: dst gets the stacked inputs, other ranks zeros
  - backward: rank i gets slice i of dst's gradient
- ``scatter(x, src, axis_name)``, ``(N, ...) -> (...)``

  - forward: rank i gets slice i of src's x
  - backward: src gets the stacked gradients; zero elsewhere
- ``reduce_scatter(x, axis_name, op='sum')``, ``(N, ...) -> (...)``

  - forward: rank i gets slice i of the reduction
  - backward: every rank gets the stacked gradients (all_gather)
- ``all_gather(x, axis_name)``, ``(...) -> (N, ...)``

  - forward: every rank gets the stacked inputs
  - backward: rank j gets the sum over ranks of their slice j (reduce_scatter)
- ``all_gather_single(x, axis_name)``, ``(k, ...) -> (N*k, ...)``

  - forward: concatenated along axis 0
  - backward: as all_gather, on the concatenation
- ``all_to_all(x, axis_name, split_axis=0, concat_axis=0)``, ``(N, ...) -> (N, ...) with defaults``

  - forward: slice j goes to rank j: y_i[j] = x_j[i]
  - backward: the inverse all_to_all of the gradient
- ``all_to_all_single(x, axis_name, output_split_sizes, input_split_sizes)``,
  ``(M, ...) -> (M', ...)``

  - forward: rows split by input_split_sizes (default equal), piece j to rank j,
    received pieces concatenated
  - backward: the inverse exchange, split sizes swapped

Non-sum ops (see ``ReduceOp``): avg's gradient is the scaled sum's; max/min send
the gradient to the rank holding the extremum, the lowest such rank on ties; prod's
is as in calculus (the product of the other ranks' values, exact with zeros).
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
