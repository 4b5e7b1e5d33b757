"""``tensorplay_jax.distributed.nn.api``: ``RemoteModule`` and ``interface``."""

from tensorplay_jax.distributed.nn.api._device import RemoteDevice as RemoteDevice
from tensorplay_jax.distributed.nn.api._device import parse_remote_device as parse_remote_device
from tensorplay_jax.distributed.nn.api._interface import interface as interface
from tensorplay_jax.distributed.nn.api.remote_module import RemoteModule as RemoteModule

__all__ = ["RemoteDevice", "RemoteModule", "interface", "parse_remote_device"]
