"""c10d's options objects of the ``ProcessGroup`` methods (``pg.allreduce(tensors, opts)``).

tensorplay code that calls a collective on the group object passes its settings in
one of these (``opts = dist.AllreduceOptions(); opts.reduceOp = dist.ReduceOp.MAX``),
or, in the methods' other forms, as arguments. Each is a plain dataclass with
tensorplay's field names and defaults: ranks are *group* ranks, ``timeout`` is
tensorplay's "unset" (a negative ``timedelta``: the group's own timeout), and
``asyncOp`` is accepted and has no effect (a method always returns a ``Work``).

Example:
  >>> from tensorplay_jax.distributed import BroadcastOptions
  >>> opts = BroadcastOptions()
  >>> opts.rootRank = 1
  >>> opts
  BroadcastOptions(rootRank=1, rootTensor=0, timeout=datetime.timedelta(days=-1, seconds=86399, microseconds=999000), asyncOp=True)
"""  # noqa: E501

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from tensorplay_jax.collectives.reduce_op import ReduceOp

__all__ = [
    "UNSET_TIMEOUT",
    "AllToAllOptions",
    "AllgatherOptions",
    "AllreduceCoalescedOptions",
    "AllreduceOptions",
    "BarrierOptions",
    "BroadcastOptions",
    "GatherOptions",
    "ReduceOptions",
    "ReduceScatterOptions",
    "ScatterOptions",
]

# tensorplay's kUnsetTimeout: the call runs under its group's timeout.
UNSET_TIMEOUT = datetime.timedelta(milliseconds=-1)


@dataclasses.dataclass
class AllreduceOptions:
    """``ProcessGroup.allreduce``'s options: the reduction."""

    reduceOp: ReduceOp = ReduceOp.SUM
    timeout: datetime.timedelta = UNSET_TIMEOUT
    asyncOp: bool = True


@dataclasses.dataclass
class AllreduceCoalescedOptions(AllreduceOptions):
    """``ProcessGroup.allreduce_coalesced``'s options (those of ``allreduce``)."""


@dataclasses.dataclass
class BroadcastOptions:
    """``ProcessGroup.broadcast``'s options: the source's group rank, and which of its
    tensors is sent."""

    rootRank: int = 0
    rootTensor: int = 0
    timeout: datetime.timedelta = UNSET_TIMEOUT
    asyncOp: bool = True


@dataclasses.dataclass
class ReduceOptions:
    """``ProcessGroup.reduce``'s options: the reduction and the destination's group rank."""

    reduceOp: ReduceOp = ReduceOp.SUM
    rootRank: int = 0
    rootTensor: int = 0
    timeout: datetime.timedelta = UNSET_TIMEOUT
    asyncOp: bool = True


@dataclasses.dataclass
class AllgatherOptions:
    """``ProcessGroup.allgather``'s (and ``_allgather_base``'s) options."""

    timeout: datetime.timedelta = UNSET_TIMEOUT
    asyncOp: bool = True


@dataclasses.dataclass
class GatherOptions:
    """``ProcessGroup.gather``'s options: the destination's group rank."""

    rootRank: int = 0
    timeout: datetime.timedelta = UNSET_TIMEOUT
    asyncOp: bool = True


@dataclasses.dataclass
class ScatterOptions:
    """``ProcessGroup.scatter``'s options: the source's group rank."""

    rootRank: int = 0
    timeout: datetime.timedelta = UNSET_TIMEOUT
    asyncOp: bool = True


@dataclasses.dataclass
class ReduceScatterOptions:
    """``ProcessGroup.reduce_scatter``'s (and ``_reduce_scatter_base``'s) options."""

    reduceOp: ReduceOp = ReduceOp.SUM
    timeout: datetime.timedelta = UNSET_TIMEOUT
    asyncOp: bool = True


@dataclasses.dataclass
class AllToAllOptions:
    """``ProcessGroup.alltoall``'s (and ``alltoall_base``'s) options."""

    timeout: datetime.timedelta = UNSET_TIMEOUT
    asyncOp: bool = True


@dataclasses.dataclass
class BarrierOptions:
    """``ProcessGroup.barrier``'s options (``device_ids`` and ``device`` are for GPU
    groups: one device per process here, so they are not used)."""

    device_ids: list[int] = dataclasses.field(default_factory=list)
    timeout: datetime.timedelta = UNSET_TIMEOUT
    device: Any = None
    asyncOp: bool = True
