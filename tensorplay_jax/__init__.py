"""tensorplay_jax: the tensorplay.distributed family rebuilt on JAX, with gRPC between workers."""

from tensorplay_jax import collectives as collectives

__version__ = "0.1.0"

__all__ = ["collectives"]
