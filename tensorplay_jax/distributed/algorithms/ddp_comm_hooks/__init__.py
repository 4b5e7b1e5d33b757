"""DDP communication hooks (``register_comm_hook``): ``default_hooks`` and
``post_localSGD_hook``, as torch has them."""

from tensorplay_jax.distributed.algorithms.ddp_comm_hooks import default_hooks as default_hooks
from tensorplay_jax.distributed.algorithms.ddp_comm_hooks import (
    post_localSGD_hook as post_localSGD_hook,
)

__all__ = ["default_hooks", "post_localSGD_hook"]
