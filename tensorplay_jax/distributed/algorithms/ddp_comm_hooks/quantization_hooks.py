"""Quantizing DDP communication hooks: each rank sends its gradients as 8-bit integers.

Each rank computes affine quantization parameters (a scale and a zero point, from its
bucket's minimum and maximum, as a min-max observer of unsigned 8-bit values),
all-gathers them, quantizes its bucket with its own, all-gathers the quantized
buckets, and averages what every rank sent, dequantized. All-gather moves more bytes
than an all-reduce at large world sizes: an experiment, as in torch.

Example::

    model.register_comm_hook(None, quantization_pertensor_hook)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp

import tensorplay_jax.process_group as dist
from tensorplay_jax.distributed.algorithms.ddp_comm_hooks.default_hooks import _reduced
from tensorplay_jax.futures import Future
from tensorplay_jax.tensors import Tensor

if TYPE_CHECKING:
    from tensorplay_jax.distributed.parallel import GradBucket

__all__ = ["quantization_perchannel_hook", "quantization_pertensor_hook"]

_QMIN, _QMAX = 0.0, 255.0
_EPS = float(jnp.finfo(jnp.float32).eps)


def _qparams(lo: jax.Array, hi: jax.Array) -> jax.Array:
    """Affine unsigned 8-bit quantization parameters for values in ``[lo, hi]`` (each
    stretched to include 0): ``stack([scale, zero_point])`` in float32.

    Example:
        >>> import jax.numpy as jnp
        >>> _qparams(jnp.float32(-1.0), jnp.float32(3.0)).tolist()
        [0.01568627543747425, 64.0]
    """
    lo = jnp.minimum(lo, 0.0).astype(jnp.float32)
    hi = jnp.maximum(hi, 0.0).astype(jnp.float32)
    scale = jnp.maximum((hi - lo) / (_QMAX - _QMIN), _EPS)
    zero_point = jnp.clip(_QMIN - jnp.round(lo / scale), _QMIN, _QMAX)
    return jnp.stack([scale, zero_point])


@jax.jit
def _quantize(x: jax.Array, scale: jax.Array, zero_point: jax.Array) -> jax.Array:
    return jnp.clip(jnp.round(x / scale) + zero_point, _QMIN, _QMAX).astype(jnp.uint8)


@jax.jit
def _mean_dequantized(quantized: jax.Array, scale: jax.Array, zero_point: jax.Array) -> jax.Array:
    """The mean over ranks (axis 0) of each rank's values, dequantized with its parameters."""
    total = jnp.zeros(quantized.shape[1:], jnp.float32)
    for r in range(quantized.shape[0]):
        total = total + scale[r] * (quantized[r].astype(jnp.float32) - zero_point[r])
    return total / quantized.shape[0]


def quantization_pertensor_hook(process_group: Any, bucket: GradBucket) -> Future[Tensor]:
    """Average the bucket sent as 8-bit integers, one scale and zero point per rank.

    Args:
        process_group: the group (None: the default group).
        bucket: the bucket of gradients.

    Returns:
        A completed Future of the averaged flat buffer, in float32.
    """
    buf = bucket.buffer().value
    rank = dist.get_rank(process_group)
    params = jnp.asarray(dist.all_gather(_qparams(buf.min(), buf.max()), group=process_group))
    mine = _quantize(buf, params[rank, 0], params[rank, 1])
    every = jnp.asarray(dist.all_gather(mine, group=process_group))
    return _reduced(_mean_dequantized(every, params[:, 0], params[:, 1]))


def quantization_perchannel_hook(
    process_group: Any, bucket: GradBucket, bucket_size: int = 512
) -> Future[Tensor]:
    """Average the bucket sent as 8-bit integers, one scale and zero point per chunk of
    ``bucket_size`` elements (finer resolution for a large bucket).

    The buffer is padded with zeros to whole chunks (a full chunk of zeros when it
    divides evenly, as torch).

    Args:
        process_group: the group (None: the default group).
        bucket: the bucket of gradients.
        bucket_size: elements per chunk.

    Returns:
        A completed Future of the averaged flat buffer, in float32.
    """
    buf = bucket.buffer().value
    total = buf.shape[0]
    chunks = jnp.pad(buf, (0, bucket_size - total % bucket_size)).reshape(-1, bucket_size)
    rank = dist.get_rank(process_group)
    mine = _qparams(chunks.min(axis=1), chunks.max(axis=1))  # (2, chunks)
    params = jnp.asarray(dist.all_gather(mine, group=process_group))  # (ranks, 2, chunks)
    quantized = _quantize(chunks, params[rank, 0][:, None], params[rank, 1][:, None])
    every = jnp.asarray(dist.all_gather(quantized, group=process_group))
    mean = _mean_dequantized(every, params[:, 0, :, None], params[:, 1, :, None])
    return _reduced(mean.ravel()[:total])
