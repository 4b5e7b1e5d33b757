"""``noop_hook``: DDP without gradient communication, to measure what communication costs.

Example::

    model.register_comm_hook(None, noop_hook)  # each rank keeps its own gradients
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tensorplay_jax.distributed.algorithms.ddp_comm_hooks.default_hooks import _reduced
from tensorplay_jax.futures import Future
from tensorplay_jax.tensors import Tensor

if TYPE_CHECKING:
    from tensorplay_jax.distributed.parallel import GradBucket

__all__ = ["noop_hook"]


def noop_hook(_: Any, bucket: GradBucket) -> Future[Tensor]:
    """The bucket as it is, with no communication: for headroom analysis only (if training
    is barely faster with it, gradient averaging is not the bottleneck).

    Returns:
        A completed Future of this rank's own flat buffer.
    """
    return _reduced(bucket.buffer().value)
