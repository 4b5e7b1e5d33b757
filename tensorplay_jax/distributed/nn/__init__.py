"""``tensorplay_jax.distributed.nn``: ``RemoteModule`` (modules on other workers), ``api``,
and, as tensorplay's ``torch.distributed.nn`` re-exports them, the differentiable
collectives of :mod:`~tensorplay_jax.distributed.nn.functional` and ``ReduceOp``.

Example (in a job with a worker named ``worker1``)::

    from tensorplay_jax.distributed.nn import RemoteModule
    remote_linear = RemoteModule("worker1/cpu", tp.nn.Linear, args=(16, 8))
    out = remote_linear(tp.randn(4, 16))
"""

from tensorplay_jax.collectives import ReduceOp as ReduceOp
from tensorplay_jax.distributed.nn import api as api
from tensorplay_jax.distributed.nn.api import RemoteModule as RemoteModule
from tensorplay_jax.distributed.nn.functional import (
    all_gather,
    all_gather_single,
    all_reduce,
    all_to_all,
    all_to_all_single,
    broadcast,
    gather,
    reduce,
    reduce_scatter,
    scatter,
)

__all__ = [
    "ReduceOp",
    "RemoteModule",
    "all_gather",
    "all_gather_single",
    "all_reduce",
    "all_to_all",
    "all_to_all_single",
    "api",
    "broadcast",
    "gather",
    "reduce",
    "reduce_scatter",
    "scatter",
]
