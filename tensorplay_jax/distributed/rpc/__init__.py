"""``tensorplay_jax.distributed.rpc``: the tensorplay-shaped name of :mod:`tensorplay_jax.rpc`."""

from tensorplay_jax.rpc import *  # noqa: F403
from tensorplay_jax.rpc import __all__ as __all__
