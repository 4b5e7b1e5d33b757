"""The RPC wire types of ``Tensor`` (its array, zero-copy, and its ``requires_grad`` flag)
and of ``SparseTensor`` (its indices and values, each an out-of-band buffer, never
densified; its shape, coalesced flag and ``requires_grad``), and of ``HostShards``
(a sharded gradient on its way back: each distinct shard its own buffer).

Registered when :mod:`tensorplay_jax.distributed.autograd` is imported, which
``tensorplay_jax/__init__.py`` does, so a worker that imports only
``tensorplay_jax.distributed.rpc`` decodes Tensors too.

A Tensor always arrives as a leaf: its graph stays on the sender. Inside a
distributed autograd context the receiving worker then gives it a
"recv" node (``_sendrecv``), so gradients flow back to the sender.

Example:
    >>> import tensorplay_jax as tp
    >>> from tensorplay_jax.rpc import _codec
    >>> from tensorplay_jax.distributed.autograd import _wire
    >>> _wire.register()
    >>> t = _codec.decode(_codec.encode(tp.ones(2, requires_grad=True)))
    >>> t.requires_grad, t.is_leaf
    (True, True)
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tensorplay_jax.autograd import sparse_arrays
from tensorplay_jax.rpc import register_type
from tensorplay_jax.runtime.device import to_device
from tensorplay_jax.runtime.shards import HostShards
from tensorplay_jax.tensors import SparseTensor, Tensor

__all__ = ["SHARDS_WIRE_NAME", "SPARSE_WIRE_NAME", "WIRE_NAME", "register"]

WIRE_NAME = "tensorplay_jax.Tensor"
SPARSE_WIRE_NAME = "tensorplay_jax.SparseTensor"
SHARDS_WIRE_NAME = "tensorplay_jax.HostShards"


def _encode(t: Tensor) -> tuple[Any, bool]:
    # The jax.Array itself: the codec sends its host view (zero-copy on CPU); the other
    # side gets a NumPy array on the received bytes (see _decode).
    return t._value, t._requires_grad


def _decode(rec: tuple[Any, bool]) -> Tensor:
    value, requires_grad = rec
    # A host NumPy array stays one: operations take it as it is, .value places it.
    t = Tensor._wrap(value if isinstance(value, np.ndarray | jax.Array) else jnp.asarray(value))
    t._requires_grad = bool(requires_grad)
    return t


def _encode_sparse(t: SparseTensor) -> list[Any]:
    m = t._value  # the two arrays travel as buffers of their own (the codec's array records)
    return [m.data, m.indices, list(m.shape), sparse_arrays.is_coalesced(m), t._requires_grad]


def _decode_sparse(rec: list[Any]) -> SparseTensor:
    data, indices, shape, coalesced, requires_grad = rec
    m = sparse_arrays.bcoo_class()(
        (to_device(np.asarray(data)), to_device(np.asarray(indices))),
        shape=tuple(shape),
        indices_sorted=bool(coalesced),
        unique_indices=bool(coalesced),
    )
    t = Tensor._wrap(m)
    t._requires_grad = bool(requires_grad)
    return t  # type: ignore[return-value]


def _encode_shards(h: HostShards) -> list[Any]:
    return [list(h.shape), h.dtype.name, [[list(k), v] for k, v in h.pieces.items()]]


def _decode_shards(rec: list[Any]) -> HostShards:
    shape, dtype, pieces = rec
    return HostShards(tuple(shape), jnp.dtype(dtype), {tuple(k): v for k, v in pieces})


def register() -> None:
    """Teach the RPC codec to carry Tensors, sparse Tensors and sharded gradients (idempotent)."""
    register_type(Tensor, _encode, _decode, name=WIRE_NAME, subclasses=True, array=True)
    register_type(SparseTensor, _encode_sparse, _decode_sparse, name=SPARSE_WIRE_NAME)
    register_type(HostShards, _encode_shards, _decode_shards, name=SHARDS_WIRE_NAME)
