"""DDP communication hooks (``register_comm_hook``): ``default_hooks``, as torch has them."""

from tensorplay_jax.distributed.algorithms.ddp_comm_hooks import default_hooks as default_hooks

__all__ = ["default_hooks"]
