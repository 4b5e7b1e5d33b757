"""``Embedding(sparse=True)`` and ``EmbeddingBag``: values and gradients against torch's.

The expected numbers are torch 2.13's for the same calls (written out here): the table
``arange(20).reshape(5, 4) / 10``, indices ``[1, 2, 4, 4, 3, 1]``, offsets ``[0, 2, 2,
5]`` (an empty second bag) and the cotangent ``arange(16).reshape(4, 4)``.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay_jax as tp
from tensorplay_jax import nn
from tensorplay_jax.nn import functional as F

W = np.arange(20, dtype=np.float32).reshape(5, 4) / 10
INPUT = [1, 2, 4, 4, 3, 1]
OFFSETS = [0, 2, 2, 5]
COT = np.arange(16, dtype=np.float32).reshape(4, 4)
ROW_0, ROW_8, ROW_12 = [0.0, 1.0, 2.0, 3.0], [8.0, 9.0, 10.0, 11.0], [12.0, 13.0, 14.0, 15.0]

SUM = [[1.2, 1.4, 1.6, 1.8], [0, 0, 0, 0], [4.4, 4.7, 5.0, 5.3], [0.4, 0.5, 0.6, 0.7]]
MEAN = [
    [0.6, 0.7, 0.8, 0.9],
    [0, 0, 0, 0],
    [1.4666667, 1.5666666, 1.6666666, 1.7666668],
    [0.4, 0.5, 0.6, 0.7],
]
MAX = [[0.8, 0.9, 1.0, 1.1], [0, 0, 0, 0], [1.6, 1.7, 1.8, 1.9], [0.4, 0.5, 0.6, 0.7]]
THIRD = [2.6666667, 3.0, 3.3333335, 3.6666667]


def _table() -> tp.Tensor:
    return tp.tensor(W, requires_grad=True)


def _bag(w: tp.Tensor, mode: str, **kw) -> tp.Tensor:
    return F.embedding_bag(tp.tensor(INPUT), w, tp.tensor(OFFSETS), mode=mode, **kw)


def _backward(out: tp.Tensor) -> None:
    (out * tp.tensor(COT)).sum().backward()


# ------------------------------------------------------------------ embedding
def test_sparse_embedding_gradient_holds_the_looked_up_rows_in_input_order() -> None:
    w = _table()
    F.embedding(tp.tensor([[1, 4], [4, 0]]), w, sparse=True).sum().backward()
    g = w.grad
    assert g.is_sparse and not g.is_coalesced() and g.shape == (5, 4)
    assert g._indices().tolist() == [[1, 4, 4, 0]]
    np.testing.assert_allclose(g._values().numpy(), np.ones((4, 4)))


def test_sparse_embedding_leaves_out_the_padding_row() -> None:
    w = _table()
    F.embedding(tp.tensor([[1, 4], [4, 0]]), w, padding_idx=0, sparse=True).sum().backward()
    assert w.grad._indices().tolist() == [[1, 4, 4]]


def test_sparse_embedding_gradient_equals_the_dense_one() -> None:
    idx = tp.tensor([[3, 1, 3], [0, 2, 2]])
    dense, sparse = nn.Embedding(5, 4), nn.Embedding(5, 4, sparse=True)
    sparse.weight.data = dense.weight.data
    for m in (dense, sparse):
        (m(idx) * tp.arange(24.0).reshape(2, 3, 4)).sum().backward()
    assert sparse.weight.grad.is_sparse and not dense.weight.grad.is_sparse
    np.testing.assert_allclose(sparse.weight.grad.to_dense().numpy(), dense.weight.grad.numpy())
    assert repr(sparse) == "Embedding(5, 4, sparse=True)"


# ------------------------------------------------------------------ embedding_bag values
@pytest.mark.parametrize("mode,want", [("sum", SUM), ("mean", MEAN), ("max", MAX)])
def test_bag_values_per_mode_with_an_empty_bag(mode: str, want: list) -> None:
    np.testing.assert_allclose(_bag(tp.tensor(W), mode).numpy(), want, rtol=1e-6, atol=1e-7)


def test_two_dimensional_input_makes_each_row_a_bag() -> None:
    out = F.embedding_bag(tp.tensor([[1, 2], [4, 1]]), tp.tensor(W), mode="mean")
    np.testing.assert_allclose(out.numpy(), [[0.6, 0.7, 0.8, 0.9], [1.0, 1.1, 1.2, 1.3]])


def test_include_last_offset_ends_the_last_bag() -> None:
    out = F.embedding_bag(
        tp.tensor(INPUT), tp.tensor(W), tp.tensor([0, 2, 2, 5, 6]), mode="sum",
        include_last_offset=True,
    )  # fmt: skip
    np.testing.assert_allclose(out.numpy(), SUM, rtol=1e-6)


# ------------------------------------------------------------------ embedding_bag gradients
@pytest.mark.parametrize(
    "mode,values",
    [
        ("sum", [ROW_0, ROW_0, ROW_8, ROW_8, ROW_8, ROW_12]),
        ("mean", [[0, 0.5, 1, 1.5], [0, 0.5, 1, 1.5], THIRD, THIRD, THIRD, ROW_12]),
    ],
)
def test_sparse_bag_gradient_has_one_row_per_index(mode: str, values: list) -> None:
    w = _table()
    _backward(_bag(w, mode, sparse=True))
    assert w.grad.is_sparse and w.grad._indices().tolist() == [INPUT]
    np.testing.assert_allclose(w.grad._values().numpy(), values, rtol=1e-6)


def test_max_bag_gradient_goes_to_each_bags_maximum() -> None:
    w = _table()
    _backward(_bag(w, "max"))
    np.testing.assert_allclose(w.grad.numpy(), [[0] * 4, ROW_12, ROW_0, [0] * 4, ROW_8])


def test_per_sample_weights_scale_rows_and_get_their_gradient() -> None:
    w, psw = _table(), tp.tensor([1.0, 2, 3, 4, 5, 6], requires_grad=True)
    out = _bag(w, "sum", per_sample_weights=psw, sparse=True)
    np.testing.assert_allclose(out.numpy()[2], [17.2, 18.4, 19.6, 20.8], rtol=1e-6)
    _backward(out)
    np.testing.assert_allclose(psw.grad.numpy(), [3.8, 6.2, 67.0, 67.0, 51.8, 30.2], rtol=1e-5)
    np.testing.assert_allclose(
        w.grad._values().numpy()[1:3], [[0, 2, 4, 6], [24, 27, 30, 33]], rtol=1e-6
    )


def test_padding_index_adds_nothing_and_is_not_counted() -> None:
    w = _table()
    out = _bag(w, "mean", sparse=True, padding_idx=4)
    np.testing.assert_allclose(out.numpy()[2], [1.2, 1.3, 1.4, 1.5], rtol=1e-6)
    _backward(out)
    assert w.grad._indices().tolist() == [[1, 2, 3, 1]]


def test_dense_and_sparse_bag_gradients_agree() -> None:
    dense, sparse = _table(), _table()
    _backward(_bag(dense, "mean"))
    _backward(_bag(sparse, "mean", sparse=True))
    np.testing.assert_allclose(sparse.grad.to_dense().numpy(), dense.grad.numpy(), rtol=1e-6)


def test_embedding_bag_module_runs_the_functional() -> None:
    bag = nn.EmbeddingBag(5, 4, mode="sum", sparse=True)
    bag.weight.data = tp.tensor(W)
    out = bag(tp.tensor(INPUT), tp.tensor(OFFSETS))
    np.testing.assert_allclose(out.numpy(), SUM, rtol=1e-6)
    assert repr(bag) == "EmbeddingBag(5, 4, mode='sum', sparse=True)"


def test_bag_errors_say_what_to_change() -> None:
    with pytest.raises(ValueError, match="max mode does not support sparse weights"):
        nn.EmbeddingBag(5, 4, mode="max", sparse=True)
    with pytest.raises(NotImplementedError, match="only supported for mode='sum'"):
        _bag(_table(), "mean", per_sample_weights=tp.ones(6))
    with pytest.raises(ValueError, match="offsets has to be a 1D Tensor but got None"):
        F.embedding_bag(tp.tensor(INPUT), _table())
    with pytest.raises(ValueError, match="offsets has to be None if input is 2D"):
        F.embedding_bag(tp.tensor([[1, 2]]), _table(), tp.tensor([0]))
