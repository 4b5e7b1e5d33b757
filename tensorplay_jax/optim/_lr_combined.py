"""Schedules made of schedules: ``SequentialLR`` (one after another, at milestones) and
``ChainedScheduler`` (all at once, each multiplying the rate), as torch's."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any

from tensorplay_jax.optim._lr_base import LRScheduler
from tensorplay_jax.optim._optimizer import Optimizer

__all__ = ["ChainedScheduler", "SequentialLR"]


def _combined_state(self: Any) -> dict[str, Any]:
    """The state of a combination: its own and each scheduler's (not the optimizer)."""
    state = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "_schedulers")}
    state["_schedulers"] = [s.state_dict() for s in self._schedulers]
    return state


def _load_combined_state(self: Any, state_dict: dict[str, Any]) -> None:
    """Restore :func:`_combined_state`'s state."""
    state = dict(state_dict)
    inner = state.pop("_schedulers")
    self.__dict__.update(state)
    for s, sd in zip(self._schedulers, inner, strict=True):
        s.load_state_dict(sd)


class SequentialLR(LRScheduler):
    """``schedulers[0]`` until ``milestones[0]``, then ``schedulers[1]`` (started afresh at
    its epoch 0), and so on: the usual warm-up then decay.

    Example:
        >>> import tensorplay_jax as tp
        >>> from tensorplay_jax.optim import lr_scheduler as S
        >>> opt = tp.optim.SGD(tp.nn.Linear(2, 1).parameters(), lr=1.0)
        >>> warm = S.LinearLR(opt, start_factor=0.5, total_iters=2)
        >>> decay = S.ExponentialLR(opt, gamma=0.5)
        >>> sched = S.SequentialLR(opt, [warm, decay], milestones=[2])
        >>> rates = []
        >>> for _ in range(4):
        ...     sched.step()
        ...     rates.append(sched.get_last_lr()[0])
        >>> rates
        [0.75, 1.0, 0.5, 0.25]

    Raises:
        ValueError: no schedulers, one on another optimizer, or ``len(milestones)`` not one
            less than ``len(schedulers)``.
    """

    def __init__(
        self,
        optimizer: Optimizer,
        schedulers: Sequence[LRScheduler],
        milestones: Sequence[int],
        last_epoch: int = -1,
    ) -> None:
        if len(schedulers) < 1:
            raise ValueError(
                f"{type(self).__name__} expects at least one scheduler, but got no scheduler."
            )
        for i, s in enumerate(schedulers):
            if getattr(s, "optimizer", None) is not optimizer:
                raise ValueError(
                    f"{type(self).__name__} expects all schedulers to belong to the same "
                    f"optimizer, but got scheduler {type(s).__name__} at index {i} has "
                    f"{getattr(s, 'optimizer', None)}, which is different from "
                    f"{type(optimizer).__name__}."
                )
        if len(milestones) != len(schedulers) - 1:
            raise ValueError(
                "Sequential Schedulers expects number of schedulers provided to be one more "
                f"than the number of milestone points, but got number of schedulers "
                f"{len(schedulers)} and the number of milestones to be equal to "
                f"{len(milestones)}"
            )
        self._schedulers, self._milestones = list(schedulers), list(milestones)
        self.last_epoch, self.optimizer = last_epoch + 1, optimizer
        for group in optimizer.param_groups:  # back to the initial rates
            group["lr"] = group["initial_lr"]
        for s in self._schedulers:  # undo the step each took when made
            s.last_epoch -= 1
        self._schedulers[0]._initial_step()
        self._last_lr = self._schedulers[0].get_last_lr()

    def step(self, epoch: int | None = None) -> None:
        """Advance one epoch on the scheduler whose turn it is."""
        self.last_epoch += 1
        idx = bisect.bisect_right(self._milestones, self.last_epoch)
        scheduler = self._schedulers[idx]
        if idx > 0 and self._milestones[idx - 1] == self.last_epoch:
            scheduler.step(0)
        else:
            scheduler.step()
        self._last_lr = scheduler.get_last_lr()

    state_dict = _combined_state
    load_state_dict = _load_combined_state


class ChainedScheduler(LRScheduler):
    """Step every scheduler in ``schedulers`` at each ``step()``, in order (their factors
    multiply).

    Raises:
        ValueError: no schedulers, or one on another optimizer.
    """

    def __init__(
        self, schedulers: Sequence[LRScheduler], optimizer: Optimizer | None = None
    ) -> None:
        if len(schedulers) < 1:
            raise ValueError(
                f"{type(self).__name__} expects at least one scheduler to be chained, but got "
                "no scheduler."
            )
        optimizer = optimizer or schedulers[0].optimizer
        for i, s in enumerate(schedulers):
            if s.optimizer is not optimizer:
                raise ValueError(
                    f"{type(self).__name__} expects all schedulers to belong to the same "
                    f"optimizer, but got scheduler {type(s).__name__} at index {i} with a "
                    "different one"
                )
        self._schedulers, self.optimizer = list(schedulers), optimizer
        self._last_lr = self._current()

    def step(self, epoch: int | None = None) -> None:
        """Step every scheduler once."""
        for s in self._schedulers:
            s.step()
        self._last_lr = self._current()

    state_dict = _combined_state
    load_state_dict = _load_combined_state
