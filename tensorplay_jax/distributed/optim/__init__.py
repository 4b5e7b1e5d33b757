"""``tensorplay_jax.distributed.optim``: ``DistributedOptimizer`` over optax transforms,
``ZeroRedundancyOptimizer`` (each rank keeps the optimizer state of its share) and
``PostLocalSGDOptimizer`` (a local step, then a model averager's)."""

from tensorplay_jax.distributed.optim._optimizer import DistributedOptimizer as DistributedOptimizer
from tensorplay_jax.distributed.optim._post_local_sgd import (
    PostLocalSGDOptimizer as PostLocalSGDOptimizer,
)
from tensorplay_jax.distributed.optim._zero_redundancy import (
    ZeroRedundancyOptimizer as ZeroRedundancyOptimizer,
)

__all__ = ["DistributedOptimizer", "PostLocalSGDOptimizer", "ZeroRedundancyOptimizer"]
