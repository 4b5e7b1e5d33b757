"""tensorplay-shaped namespaces: process groups and their collectives here; rpc, autograd,
nn and optim as subpackages (imported on first use).

Example (one process per rank, e.g. started by ``python -m tensorplay_jax.run``):
  >>> import jax.numpy as jnp
  >>> import tensorplay_jax.distributed as dist
  >>> dist.init_process_group("gloo")  # doctest: +SKIP
  >>> y = dist.all_reduce(jnp.ones(4) * dist.get_rank())  # doctest: +SKIP
  >>> dist.destroy_process_group()  # doctest: +SKIP
"""

import importlib

from tensorplay_jax.collectives import ReduceOp as ReduceOp
from tensorplay_jax.distributed._pg import collectives as _pg_collectives
from tensorplay_jax.distributed._pg import group as _group
from tensorplay_jax.distributed._pg import membership as _membership
from tensorplay_jax.distributed._pg import objects as _objects
from tensorplay_jax.distributed._pg import p2p as _p2p
from tensorplay_jax.distributed._pg.collectives import all_gather as all_gather
from tensorplay_jax.distributed._pg.collectives import (
    all_gather_into_tensor as all_gather_into_tensor,
)
from tensorplay_jax.distributed._pg.collectives import all_reduce as all_reduce
from tensorplay_jax.distributed._pg.collectives import all_to_all as all_to_all
from tensorplay_jax.distributed._pg.collectives import all_to_all_single as all_to_all_single
from tensorplay_jax.distributed._pg.collectives import broadcast as broadcast
from tensorplay_jax.distributed._pg.collectives import gather as gather
from tensorplay_jax.distributed._pg.collectives import reduce as reduce
from tensorplay_jax.distributed._pg.collectives import reduce_scatter as reduce_scatter
from tensorplay_jax.distributed._pg.collectives import (
    reduce_scatter_tensor as reduce_scatter_tensor,
)
from tensorplay_jax.distributed._pg.collectives import scatter as scatter
from tensorplay_jax.distributed._pg.group import ProcessGroup as ProcessGroup
from tensorplay_jax.distributed._pg.group import barrier as barrier
from tensorplay_jax.distributed._pg.group import (
    destroy_process_group as destroy_process_group,
)
from tensorplay_jax.distributed._pg.group import get_backend as get_backend
from tensorplay_jax.distributed._pg.group import get_rank as get_rank
from tensorplay_jax.distributed._pg.group import get_world_size as get_world_size
from tensorplay_jax.distributed._pg.group import init_process_group as init_process_group
from tensorplay_jax.distributed._pg.group import is_initialized as is_initialized
from tensorplay_jax.distributed._pg.group import new_group as new_group
from tensorplay_jax.distributed._pg.membership import GroupMember as GroupMember
from tensorplay_jax.distributed._pg.membership import get_global_rank as get_global_rank
from tensorplay_jax.distributed._pg.membership import get_group_rank as get_group_rank
from tensorplay_jax.distributed._pg.membership import (
    get_process_group_ranks as get_process_group_ranks,
)
from tensorplay_jax.distributed._pg.membership import group as group
from tensorplay_jax.distributed._pg.membership import is_available as is_available
from tensorplay_jax.distributed._pg.membership import monitored_barrier as monitored_barrier
from tensorplay_jax.distributed._pg.membership import new_subgroups as new_subgroups
from tensorplay_jax.distributed._pg.objects import all_gather_object as all_gather_object
from tensorplay_jax.distributed._pg.objects import (
    broadcast_object_list as broadcast_object_list,
)
from tensorplay_jax.distributed._pg.objects import gather_object as gather_object
from tensorplay_jax.distributed._pg.objects import recv_object_list as recv_object_list
from tensorplay_jax.distributed._pg.objects import scatter_object_list as scatter_object_list
from tensorplay_jax.distributed._pg.objects import send_object_list as send_object_list
from tensorplay_jax.distributed._pg.p2p import P2POp as P2POp
from tensorplay_jax.distributed._pg.p2p import batch_isend_irecv as batch_isend_irecv
from tensorplay_jax.distributed._pg.p2p import irecv as irecv
from tensorplay_jax.distributed._pg.p2p import isend as isend
from tensorplay_jax.distributed._pg.p2p import recv as recv
from tensorplay_jax.distributed._pg.p2p import send as send
from tensorplay_jax.distributed._pg.work import Future as Future
from tensorplay_jax.distributed._pg.work import Work as Work

_SUBPACKAGES = ("rpc", "autograd", "nn", "optim")


def __getattr__(name: str):
    # Subpackages load on first attribute access, so this package imports even while
    # (or where) one of them is absent; ``import tensorplay_jax.distributed.rpc`` works as usual.
    if name in _SUBPACKAGES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# The names are listed once, in the ``__all__`` of the ``_pg`` modules they come from.
__all__ = [
    *_group.__all__,
    "ReduceOp",
    *_pg_collectives.__all__,
    *_p2p.__all__,
    *_objects.__all__,
    *_membership.__all__,
    "Future",
    "Work",
]
