"""The default DDP communication hooks: ``allreduce_hook``, ``fp16_compress_hook`` and
``bf16_compress_hook``, and the wrappers that run any hook in half precision.

A hook is ``hook(state, bucket) -> Future`` of the reduced flat buffer; ``state``
is the process group (None: the default group). DDP calls it on its communication
thread as soon as the bucket's last gradient is ready, so the collective inside
may block without holding up the backward pass.

Example::

    from tensorplay_jax.distributed.algorithms.ddp_comm_hooks import default_hooks
    model.register_comm_hook(None, default_hooks.fp16_compress_hook)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jax.numpy as jnp

import tensorplay_jax.process_group as dist
from tensorplay_jax.futures import Future
from tensorplay_jax.tensors import Tensor

if TYPE_CHECKING:
    from tensorplay_jax.distributed.parallel import GradBucket

__all__ = [
    "allreduce_hook",
    "bf16_compress_hook",
    "bf16_compress_wrapper",
    "fp16_compress_hook",
    "fp16_compress_wrapper",
]

CommHook = Callable[[Any, "GradBucket"], Future[Tensor]]


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
    return _allreduce_fut(process_group, bucket.buffer())


def _allreduce_fut(process_group: Any, tensor: Any) -> Future[Tensor]:
    """``tensor`` (a Tensor or an array) divided by the group's size and all-reduced (sum):
    the building block custom hooks call, under torch's private name.

    Returns:
        A completed Future of the averaged Tensor (``tensor`` itself is left as it was;
        torch's divides it in place).
    """
    n = dist.get_world_size(process_group)
    return _reduced(dist.all_reduce(_array(tensor) / n, group=process_group))


def _compress_hook(dtype: Any, process_group: Any, bucket: GradBucket) -> Future[Tensor]:
    n = dist.get_world_size(process_group)
    buf = bucket.buffer().value
    compressed = buf.astype(dtype) / n  # cast, then divide in the half type, as torch
    reduced = dist.all_reduce(compressed, group=process_group)
    return _reduced(jnp.asarray(reduced).astype(buf.dtype))


def fp16_compress_hook(process_group: Any, bucket: GradBucket) -> Future[Tensor]:
    """Average the bucket in half precision: cast to float16, divide by the group size,
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


def _compress_wrapper(dtype: Any, hook: CommHook) -> CommHook:
    def compressed_hook(hook_state: Any, bucket: GradBucket) -> Future[Tensor]:
        buf = bucket.buffer().value
        bucket.set_buffer(Tensor._wrap(buf.astype(dtype)))
        fut = hook(hook_state, bucket)
        return fut.then(lambda f: Tensor._wrap(jnp.asarray(_array(f.value())).astype(buf.dtype)))

    compressed_hook.__name__ = compressed_hook.__qualname__ = (
        f"{jnp.dtype(dtype).name}_{getattr(hook, '__name__', 'hook')}"
    )
    return compressed_hook


def _array(value: Any) -> Any:
    return value.value if isinstance(value, Tensor) else value


def fp16_compress_wrapper(hook: CommHook) -> CommHook:
    """``hook`` run on the bucket cast to float16, its result cast back to the bucket's dtype.

    ``fp16_compress_wrapper(allreduce_hook)`` is :func:`fp16_compress_hook`; the wrapper
    halves the bytes of any hook, PowerSGD's too.

    Example::

        state = PowerSGDState(process_group=None, start_powerSGD_iter=10)
        model.register_comm_hook(state, fp16_compress_wrapper(powerSGD_hook))
    """
    return _compress_wrapper(jnp.float16, hook)


def bf16_compress_wrapper(hook: CommHook) -> CommHook:
    """As :func:`fp16_compress_wrapper`, in bfloat16."""
    return _compress_wrapper(jnp.bfloat16, hook)
