"""``tensorplay_jax.nn.parallel``: ``DistributedDataParallel`` and ``GradBucket``.

It lives here, beside distributed autograd and the process groups it runs on, and
is served as ``tensorplay_jax.nn.parallel`` (tensorplay's ``torch.nn.parallel``) by
the package facade.
"""

from tensorplay_jax.distributed.parallel._bucket import GradBucket as GradBucket
from tensorplay_jax.distributed.parallel._ddp import (
    DistributedDataParallel as DistributedDataParallel,
)

__all__ = ["DistributedDataParallel", "GradBucket"]
