"""``tensorplay_jax.distributed.optim``: ``DistributedOptimizer`` over optax transforms, and
``ZeroRedundancyOptimizer`` (each rank keeps the optimizer state of its share)."""

from tensorplay_jax.distributed.optim._optimizer import DistributedOptimizer as DistributedOptimizer
from tensorplay_jax.distributed.optim._zero_redundancy import (
    ZeroRedundancyOptimizer as ZeroRedundancyOptimizer,
)

__all__ = ["DistributedOptimizer", "ZeroRedundancyOptimizer"]
