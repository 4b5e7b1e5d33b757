"""``HierarchicalModelAverager``: groups of several sizes average at several periods.

Example (four ranks: pairs every 2 steps, all four every 4)::

    averager = HierarchicalModelAverager(OrderedDict([(2, 2), (4, 4)]), warmup_steps=100)
    opt.step()
    averager.average_parameters(model.parameters())
"""

from __future__ import annotations

import logging
import warnings
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

import tensorplay_jax.process_group as dist
from tensorplay_jax.distributed.algorithms.model_averaging import utils
from tensorplay_jax.distributed.algorithms.model_averaging.averagers import ModelAverager

__all__ = ["HierarchicalModelAverager"]

logger = logging.getLogger(__name__)


class HierarchicalModelAverager(ModelAverager):
    """Average the parameters in groups of several sizes, each at its own period.

    At step ``k >= warmup_steps``, the largest period that divides ``k`` picks the
    groups that average (each rank in its group of that level); no period dividing
    ``k``: no averaging. The groups of a level are consecutive ranks of
    ``process_group`` (``new_subgroups(group_size)``), made by the constructor on every
    rank alike; the last level is ``process_group`` itself.

    Args:
      period_group_size_dict: period to group size, in increasing period order; the
        last size must be the size of ``process_group``.
      warmup_steps: steps before the first averaging.
      process_group: the whole group (default: every process).

    Raises:
      ValueError: no levels, a period below 1, the last size not the group's, or a
        negative ``warmup_steps``.
    """

    def __init__(
        self,
        period_group_size_dict: Mapping[int, int] | None = None,
        warmup_steps: int = 0,
        process_group: Any = None,
    ) -> None:
        super().__init__(process_group)
        if not period_group_size_dict:
            raise ValueError("Arg ``period_group_size_dict`` must not be empty.")
        self._periods = list(period_group_size_dict)
        if self._periods[0] <= 0:
            raise ValueError(
                "The minimum period in arg ``period_group_size_dict`` must be a positive value."
            )
        if self._periods[-1] == 1:
            warnings.warn(
                "When the maximum period in arg ``period_group_size_dict`` is 1, no need to use "
                "model averaging because the communication cost of all-reducing parameters will "
                "be no less than the cost of all-reducing gradients by DistributedDataParallel "
                "in the backward pass. Therefore, only DistributedDataParallel should be used "
                "for this case.",
                UserWarning,
                stacklevel=2,
            )
        size = dist.get_world_size(self.process_group)
        last = list(period_group_size_dict.values())[-1]
        if last != size:
            raise ValueError(
                f"The last value in arg ``period_group_size_dict`` {last} must be equal to the "
                f"size of arg ``process_group`` {size}."
            )
        self.period_process_group_dict: OrderedDict[int, Any] = OrderedDict()
        for period, group_size in period_group_size_dict.items():
            logger.info(
                "Each group of %s processes averages parameters every %s iterations, if no "
                "higher level averages then.",
                group_size,
                period,
            )
            if group_size == size:
                self.period_process_group_dict[period] = self.process_group
            else:
                mine, _ = dist.new_subgroups(group_size=group_size, group=self.process_group)
                self.period_process_group_dict[period] = mine
        if warmup_steps < 0:
            raise ValueError("Arg ``warmup_steps`` must be a non-negative number.")
        self.warmup_steps = warmup_steps

    def _find_process_group(self) -> Any:
        """The group of the largest period that divides the step, or None."""
        for period in reversed(self._periods):
            if self.step % period == 0:
                return self.period_process_group_dict[period]
        return None

    def average_parameters(self, params: Iterable[Any]) -> None:
        """Average those of ``params`` that have a gradient in this step's group (if any,
        after the warm-up); count the step either way."""
        if self.step >= self.warmup_steps:
            group = self._find_process_group()
            if group is not None:
                utils.average_parameters_or_parameter_groups(params, group)
        self.step += 1
