"""The default DDP communication hooks: ``allreduce_hook`` and ``fp16_compress_hook``.

A hook is ``hook(state, bucket) -> Future`` of the reduced flat buffer; ``state``
is the process group (None: the default group). DDP calls it on its communication
thread as soon as the bucket's last gradient is ready, so the collective inside
may block without holding up the backward pass.

Example::

    from tensorplay_jax.distributed.algorithms.ddp_comm_hooks import default_hooks
    model.register_comm_hook(None, default_hooks.fp16_compress_hook)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import jax.numpy as jnp

import tensorplay_jax.process_group as dist
from tensorplay_jax.futures import Future
from tensorplay_jax.tensors import Tensor

if TYPE_CHECKING:
    from tensorplay_jax.distributed.parallel import GradBucket

__all__ = ["allreduce_hook", "bf16_compress_hook", "fp16_compress_hook"]


def _reduced(value: Any) -> Future[Tensor]:
    fut: Future[Tensor] = Future()
    fut.set_result(Tensor._wrap(value))
    return fut


def allreduce_hook(process_group: Any, bucket: GradBucket) -> Future[Tensor]:
    """Average the bucket across the group: divide by its size, then all-reduce (sum).

    Args:
        process_group: the group (None: the default group).
        bucket: the bucket of gradients.

    Returns:
        A completed Future of the averaged flat buffer.
    """
    n = dist.get_world_size(process_group)
    buf = bucket.buffer().value
    return _reduced(dist.all_reduce(buf / n, group=process_group))


def _compress_hook(dtype: Any, process_group: Any, bucket: GradBucket) -> Future[Tensor]:
    n = dist.get_world_size(process_group)
    buf = bucket.buffer().value
    compressed = (buf / n).astype(dtype)
    reduced = dist.all_reduce(compressed, group=process_group)
    return _reduced(jnp.asarray(reduced).astype(buf.dtype))


def fp16_compress_hook(process_group: Any, bucket: GradBucket) -> Future[Tensor]:
    """Average the bucket in half precision: divide by the group size, cast to float16,
    all-reduce, cast back (half the bytes on the wire, float16's precision).

    Args:
        process_group: the group (None: the default group).
        bucket: the bucket of gradients.

    Returns:
        A completed Future of the averaged flat buffer, in the bucket's dtype.
    """
    return _compress_hook(jnp.float16, process_group, bucket)


def bf16_compress_hook(process_group: Any, bucket: GradBucket) -> Future[Tensor]:
    """As :func:`fp16_compress_hook`, in bfloat16 (float32's range, 8 bits of mantissa)."""
    return _compress_hook(jnp.bfloat16, process_group, bucket)
