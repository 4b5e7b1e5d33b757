"""``tensorplay_jax.distributed.optim``: ``DistributedOptimizer`` over optax transforms."""

from tensorplay_jax.distributed.optim._optimizer import DistributedOptimizer as DistributedOptimizer

__all__ = ["DistributedOptimizer"]
