"""Model averagers: ``PeriodicModelAverager`` averages parameters every ``period`` steps."""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any

import tensorplay_jax.process_group as dist
from tensorplay_jax.distributed.algorithms.model_averaging import utils

__all__ = ["ModelAverager", "PeriodicModelAverager"]


class ModelAverager:
    """The base of the averagers: a process group and a step counter.

    Args:
      process_group: the group to average over (default: every process).
    """

    def __init__(self, process_group: Any = None) -> None:
        self.process_group = dist.group.WORLD if process_group is None else process_group
        self.step = 0

    def average_parameters(self, params: Iterable[Any]) -> None:
        """Average ``params`` (or not, by the averager's rule) and count one step."""
        raise NotImplementedError


class PeriodicModelAverager(ModelAverager):
    """Average the parameters across the group every ``period`` steps after ``warmup_steps``.

    Call :meth:`average_parameters` once per training step, after the optimizer's
    step: at step ``k`` it averages when ``k >= warmup_steps`` and ``(k -
    warmup_steps) % period == 0``. With DDP and ``post_localSGD_hook`` (its
    ``start_localSGD_iter`` equal to ``warmup_steps``) this is post-local SGD.

    Args:
      period: steps per averaging (at least 1; 1 warns: DDP alone costs no more).
      warmup_steps: steps before the first averaging.
      process_group: the group to average over (default: every process).

    Raises:
      ValueError: ``period < 1`` or ``warmup_steps < 0``.

    Example (every rank, after ``opt.step()``)::

        averager = PeriodicModelAverager(period=4, warmup_steps=100)
        averager.average_parameters(model.parameters())
    """

    def __init__(self, period: int, warmup_steps: int = 0, process_group: Any = None) -> None:
        super().__init__(process_group)
        if warmup_steps < 0:
            raise ValueError("Arg ``warmup_steps`` must be a non-negative number.")
        if period < 1:
            raise ValueError("Arg ``period`` must be a positive value.")
        if period == 1:
            warnings.warn(
                "When period is 1, no need to use model averaging because the communication "
                "cost of all-reducing parameters will be no less than the cost of all-reducing "
                "gradients by DistributedDataParallel in the backward pass. Therefore, only "
                "DistributedDataParallel should be used for this case.",
                UserWarning,
                stacklevel=2,
            )
        self.warmup_steps = warmup_steps
        self.period = period

    def average_parameters(self, params: Iterable[Any]) -> None:
        """Average those of ``params`` (parameters or param groups) that have a gradient,
        when this step is an averaging one; count the step either way."""
        k = self.step - self.warmup_steps
        if k >= 0 and k % self.period == 0:
            utils.average_parameters_or_parameter_groups(params, self.process_group)
        self.step += 1
