"""Gradient buckets: how parameters are grouped for all-reduce, and ``GradBucket``.

Buckets follow torch's reducer: parameters in *reverse* registration order (the
order their gradients are ready in a backward pass over a feed-forward model),
one dtype per bucket, a bucket closed once it holds at least its byte cap; with
DDP's default cap the first bucket's is small (:data:`FIRST_BUCKET_BYTES`) so that
the first all-reduce starts early in the backward pass.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tensorplay_jax.runtime import flat as flat_buffer
from tensorplay_jax.tensors import Tensor

__all__ = ["FIRST_BUCKET_BYTES", "Bucket", "GradBucket", "assign_buckets"]

FIRST_BUCKET_BYTES = 1024 * 1024  # torch's dist._DEFAULT_FIRST_BUCKET_BYTES


class Bucket:
    """One bucket's layout: which parameters (indices into the DDP parameter list), in
    which order (their place in the flat buffer, ``runtime.flat``), and how many are
    still pending."""

    __slots__ = ("dtype", "index", "numel", "params", "pending", "shapes")

    def __init__(self, index: int, params: list[int], shapes: list[tuple[int, ...]], dtype: Any):
        self.index = index
        self.params = params
        self.shapes = shapes
        self.dtype = np.dtype(dtype)
        self.numel = sum(math.prod(s) for s in shapes)
        self.pending = len(params)

    def flatten(self, grads: Sequence[Any]) -> jax.Array:
        """The bucket's flat buffer from one gradient array per parameter (None: zeros)."""
        return flat_buffer.flatten(
            [
                jnp.zeros(s, self.dtype) if g is None else g
                for g, s in zip(grads, self.shapes, strict=True)
            ],
            self.dtype,
        )

    def split(self, flat: Any) -> list[jax.Array]:
        """``flat`` (a reduced buffer) back into one array per parameter, shaped as it."""
        return flat_buffer.split(flat, self.shapes)


def assign_buckets(
    params: Sequence[Tensor], cap_bytes: int, first_cap_bytes: int | None = None
) -> list[Bucket]:
    """Parameters into buckets, as torch's ``compute_bucket_assignment_by_size``.

    Args:
        params: the parameters, in registration order.
        cap_bytes: a bucket is closed once it holds at least this many bytes.
        first_cap_bytes: the first bucket's cap (None: ``cap_bytes``). DDP gives
            :data:`FIRST_BUCKET_BYTES` when ``bucket_cap_mb`` is left to its default, as
            torch 2.13 does (a cap the user sets holds for the first bucket too).

    Returns:
        The buckets in the order they are reduced (the last parameters first).
    """
    buckets: list[Bucket] = []
    open_: dict[np.dtype, tuple[list[int], list[tuple[int, ...]], int]] = {}

    def close(dtype: np.dtype) -> None:
        idx, shapes, _ = open_.pop(dtype)
        buckets.append(Bucket(len(buckets), idx, shapes, dtype))

    for i in reversed(range(len(params))):
        p = params[i]
        dtype = np.dtype(p.dtype)
        idx, shapes, size = open_.get(dtype, ([], [], 0))
        idx.append(i)
        shapes.append(tuple(p.shape))
        size += math.prod(p.shape) * dtype.itemsize
        open_[dtype] = (idx, shapes, size)
        limit = cap_bytes if buckets or first_cap_bytes is None else first_cap_bytes
        if size >= limit:
            close(dtype)
    for dtype in list(open_):
        close(dtype)
    return buckets


class GradBucket:
    """What a communication hook gets: one bucket's flattened gradients (torch's
    ``dist.GradBucket``).

    Example (inside a hook)::

        def hook(state, bucket):
            print(bucket.index(), bucket.buffer().shape, bucket.is_last())
            return allreduce_hook(state, bucket)
    """

    def __init__(
        self,
        index: int,
        buffer: Tensor,
        params: list[Tensor],
        layout: Bucket,
        is_last: bool,
    ) -> None:
        self._index = index
        self._buffer = buffer
        self._params = params
        self._layout = layout
        self._is_last = is_last

    def index(self) -> int:
        """The bucket's index; bucket 0 holds the last parameters and is reduced first."""
        return self._index

    def buffer(self) -> Tensor:
        """The flattened gradients of the bucket's parameters, one 1-D Tensor."""
        return self._buffer

    def set_buffer(self, buffer: Any) -> None:
        """Replace the flat buffer (a hook that compresses may hand back another)."""
        self._buffer = buffer if isinstance(buffer, Tensor) else Tensor(buffer)

    def gradients(self) -> list[Tensor]:
        """Each parameter's gradient, read from the buffer and shaped as the parameter."""
        return [Tensor._wrap(g) for g in self._layout.split(self._buffer.value)]

    def parameters(self) -> list[Tensor]:
        """The bucket's parameters, in the order of :meth:`gradients`."""
        return list(self._params)

    def is_last(self) -> bool:
        """Whether this is the last bucket of the backward pass (the first parameters)."""
        return self._is_last

    def __repr__(self) -> str:
        return f"GradBucket(index={self._index}, numel={self._layout.numel})"
