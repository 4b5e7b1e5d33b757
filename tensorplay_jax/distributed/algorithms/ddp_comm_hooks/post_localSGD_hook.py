"""The post-local SGD communication hook: DDP's gradients averaged across the whole group
for a warm-up, then only within a subgroup (the ranks of one host by default).

Used with a model averager after each optimizer step
(``model_averaging.averagers.PeriodicModelAverager``, or
``distributed.optim.PostLocalSGDOptimizer``), whose ``warmup_steps`` equal the
state's ``start_localSGD_iter``.

Example (every rank)::

    state = PostLocalSGDState(process_group=None, subgroup=None, start_localSGD_iter=100)
    model.register_comm_hook(state, post_localSGD_hook)
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import tensorplay_jax.process_group as dist
from tensorplay_jax.distributed.algorithms.ddp_comm_hooks.default_hooks import (
    _reduced,
    allreduce_hook,
)
from tensorplay_jax.futures import Future
from tensorplay_jax.tensors import Tensor

if TYPE_CHECKING:
    from tensorplay_jax.distributed.parallel import GradBucket

__all__ = ["PostLocalSGDState", "post_localSGD_hook"]

logger = logging.getLogger(__name__)


class PostLocalSGDState:
    """What ``post_localSGD_hook`` needs: the groups, when local SGD starts, the count.

    Args:
      process_group: the group of the warm-up's averaging (None: every process).
      subgroup: the group of the local steps' averaging (None: made by
        ``new_subgroups()`` at the first local step, the ranks of each host).
      start_localSGD_iter: iterations (backward passes) averaged across the whole group.
      post_local_gradient_allreduce: average within ``subgroup`` after the warm-up
        (False: each rank keeps its own gradients).

    Attributes:
      iter: the backward passes seen so far (counted at each pass's last bucket).
    """

    __slots__ = (
        "iter",
        "post_local_gradient_allreduce",
        "process_group",
        "start_localSGD_iter",
        "subgroup",
    )

    def __init__(
        self,
        process_group: Any,
        subgroup: Any,
        start_localSGD_iter: int,
        post_local_gradient_allreduce: bool = True,
    ) -> None:
        logger.info("Local SGD will be started after %s iterations", start_localSGD_iter)
        self.process_group = process_group
        self.subgroup = subgroup
        self.start_localSGD_iter = start_localSGD_iter
        self.post_local_gradient_allreduce = post_local_gradient_allreduce
        self.iter = 0

    def maybe_increase_iter(self, bucket: GradBucket) -> None:
        """Count one iteration at a backward pass's last bucket."""
        if bucket.is_last():
            self.iter += 1
        if self.iter == self.start_localSGD_iter:
            logger.info("Start to apply local SGD after %s iterations.", self.iter)


def post_localSGD_hook(state: PostLocalSGDState, bucket: GradBucket) -> Future[Tensor]:
    """Average the bucket across ``state.process_group`` until ``start_localSGD_iter``
    iterations have run, then within ``state.subgroup`` (or not at all, with
    ``post_local_gradient_allreduce=False``).

    Returns:
      A completed Future of the averaged (or kept) flat buffer.
    """
    if state.iter < state.start_localSGD_iter:
        state.maybe_increase_iter(bucket)
        return allreduce_hook(state.process_group, bucket)
    if not state.post_local_gradient_allreduce:
        return _reduced(bucket.buffer().value)
    if state.subgroup is None:
        state.subgroup, _ = dist.new_subgroups()
    return allreduce_hook(state.subgroup, bucket)
