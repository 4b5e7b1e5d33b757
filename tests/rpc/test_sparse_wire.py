"""The wire format carries sparse COO tensors as indices and values, never densified."""

from __future__ import annotations

import numpy as np

import tensorplay_jax as tp
from tensorplay_jax.rpc import _codec


def _sparse(rows: int = 10, coalesce: bool = False, requires_grad: bool = False) -> tp.Tensor:
    x = tp.sparse_coo_tensor(
        [[0, 1, 1], [2, 0, 2]], [3.2, 4.1, 5.3], (rows, 3), requires_grad=requires_grad
    )
    return x.coalesce() if coalesce else x


def test_sparse_tensor_round_trips_with_indices_values_and_flags() -> None:
    for coalesce in (False, True):
        x = _sparse(coalesce=coalesce, requires_grad=True)
        y = _codec.decode(_codec.encode(x))
        assert y.is_sparse and y.shape == x.shape and y.requires_grad and y.is_leaf
        assert y.is_coalesced() == coalesce
        np.testing.assert_array_equal(y._indices().numpy(), x._indices().numpy())
        np.testing.assert_array_equal(y._values().numpy(), x._values().numpy())


def test_indices_and_values_travel_as_two_buffers_not_the_dense_tensor() -> None:
    enc = _codec.encode(_sparse(rows=10_000_000))
    sizes = sorted(memoryview(b).nbytes for b in enc.buffers)
    itemsize = np.dtype(tp.sparse_coo_tensor([[0]], [1.0])._indices().dtype).itemsize
    assert sizes == sorted([3 * 4, 3 * 2 * itemsize])  # values float32; indices (nnz, 2)
    assert len(enc.header) < 1_000


def test_hybrid_sparse_tensor_keeps_its_value_rows() -> None:
    x = tp.sparse_coo_tensor([[4, 1]], np.arange(6, dtype=np.float32).reshape(2, 3), (9, 3))
    y = _codec.decode(_codec.encode([x, {"k": x}]))
    for t in (y[0], y[1]["k"]):
        assert (t.sparse_dim(), t.dense_dim()) == (1, 1)
        np.testing.assert_array_equal(t.to_dense().numpy(), x.to_dense().numpy())


def test_dense_tensor_still_travels_as_one_array_record() -> None:
    y = _codec.decode(_codec.encode(tp.ones(3)))
    assert not y.is_sparse and y.tolist() == [1.0, 1.0, 1.0]
