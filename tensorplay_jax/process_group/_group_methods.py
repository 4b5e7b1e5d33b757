"""c10d's methods of a ``ProcessGroup`` object, from one table: each is the module's function
on that group.

torch code may call a collective on the group object (``pg.monitored_barrier(timeout)``)
rather than through ``torch.distributed`` with ``group=pg``. The functions live with
the rest of their kind (``_membership``), which imports ``_group``; the package's
``__init__`` sets this table on :class:`~tensorplay_jax.process_group.ProcessGroup`
once, as ``tensors/_methods.py`` sets the Tensor's methods.
"""

from __future__ import annotations

from typing import Any

from tensorplay_jax.process_group import _membership
from tensorplay_jax.process_group._group import ProcessGroup

__all__ = ["METHODS", "attach"]


def monitored_barrier(
    self: ProcessGroup, timeout: Any = None, wait_all_ranks: bool = False
) -> None:
    """``monitored_barrier(group=self, timeout, wait_all_ranks)``: group rank 0 names the
    ranks that did not arrive (c10d's ``ProcessGroup.monitored_barrier``)."""
    _membership.monitored_barrier(self, timeout, wait_all_ranks)


METHODS = {"monitored_barrier": monitored_barrier}


def attach() -> None:
    """Set every method of :data:`METHODS` on ``ProcessGroup``."""
    for name, fn in METHODS.items():
        setattr(ProcessGroup, name, fn)
