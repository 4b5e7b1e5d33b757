"""``Join``: training on uneven inputs, as tensorplay's ``torch.distributed.algorithms.Join``.

Each rank runs its own number of iterations inside ``with Join([model]):`` (or
``with model.join():``). Every forward of a joinable gathers, across its process
group, whether each rank is still active and whether it will sync gradients in
the backward pass (one ``all_gather`` of two int32 flags). A rank out of inputs
reaches ``__exit__`` and, round after round, takes part in that gather with
zeros and *shadows* the collectives of the others' iteration (each joinable's
``JoinHook.main_hook``: for DDP, its buffer broadcast and its bucket all-reduces
with zero gradients), until a round finds every rank joined. Then each joinable's
``post_hook(is_last_joiner)`` runs (DDP broadcasts the final model from a rank
that joined last). Every collective has the group's timeout.

Example (each rank with its own number of batches)::

    with model.join():
        for x in my_batches:
            model(x).sum().backward()
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

import tensorplay_jax.process_group as dist

__all__ = ["Join", "JoinHook", "Joinable"]

_EARLY = "Detected at least one rank that exhausted inputs. Throwing across all ranks."
_tls = threading.local()


class JoinHook:
    """What a joinable does for the others while its rank is joined (both no-ops here)."""

    def main_hook(self) -> None:
        """Shadow one iteration of the ranks still active."""

    def post_hook(self, is_last_joiner: bool) -> None:
        """Every rank joined; ``is_last_joiner``: this rank was among the last to."""


class Joinable:
    """A class usable under :class:`Join`: it gives a :class:`JoinHook` and its group,
    and calls :meth:`Join.notify_join_context` at each iteration."""

    def join_hook(self, **kwargs: Any) -> JoinHook:
        """The hook shadowing this joinable's collectives on a joined rank."""
        raise NotImplementedError

    @property
    def join_device(self) -> Any:
        """The device of the join collectives (the CPU here)."""
        return "cpu"

    @property
    def join_process_group(self) -> Any:
        """The group the join collectives run on."""
        raise NotImplementedError


class Join:
    """Context manager for training with uneven inputs across the ranks of a group.

    Args:
        joinables: the joinables taking part (at least one; the first one's process
            group carries the join collectives).
        enable: False turns the context into a no-op.
        throw_on_early_termination: raise on every rank as soon as one runs out of
            inputs, instead of shadowing.
        **kwargs: passed to each ``join_hook`` (DDP: ``divide_by_initial_world_size``).

    Raises:
        ValueError: no joinables.
        RuntimeError: with ``throw_on_early_termination``, when a rank joined.
    """

    def __init__(
        self,
        joinables: Sequence[Joinable],
        enable: bool = True,
        throw_on_early_termination: bool = False,
        **kwargs: Any,
    ) -> None:
        if len(joinables) == 0:
            raise ValueError("The join context manager requires at least one joinable")
        self._joinables = list(joinables)
        self._hooks = [j.join_hook(**kwargs) for j in self._joinables]
        self._enable = enable
        self._throw = throw_on_early_termination
        self._group = self._joinables[0].join_process_group
        self.flags: np.ndarray | None = None  # the last round: (N, 2) [active, sync] per rank

    def __enter__(self) -> Join:
        self._prev = getattr(_tls, "join", None)
        if self._enable:
            _tls.join = self
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        try:
            if not self._enable or exc_type is not None:
                return
            is_last_joiner = True
            while True:
                flags = self._gather(active=False, sync=False)
                if not flags[:, 0].any():
                    break
                is_last_joiner = False
                if self._throw:
                    raise RuntimeError(_EARLY)
                for hook in self._hooks:
                    hook.main_hook()
            for hook in self._hooks:
                hook.post_hook(is_last_joiner)
        finally:
            _tls.join = self._prev

    def _gather(self, *, active: bool, sync: bool) -> np.ndarray:
        mine = np.array([int(active), int(sync)], np.int32)
        self.flags = np.asarray(dist.all_gather(mine, group=self._group))
        return self.flags

    @staticmethod
    def current() -> Join | None:
        """The enabled ``Join`` context this thread is in, or None."""
        return getattr(_tls, "join", None)

    @staticmethod
    def notify_join_context(joinable: Joinable, *, sync: bool = True) -> np.ndarray | None:
        """Called by ``joinable`` at each iteration (before its collectives): the round's
        gathered flags, ``(N, 2)`` [active, sync] per group rank, when ``joinable`` is
        the first of an enabled ``Join`` in this thread; None otherwise.

        Raises:
            RuntimeError: with ``throw_on_early_termination``, a rank has joined.
        """
        join = Join.current()
        if join is None or joinable is not join._joinables[0]:
            return None
        flags = join._gather(active=True, sync=sync)
        if join._throw and not flags[:, 0].all():
            raise RuntimeError(_EARLY)
        return flags
