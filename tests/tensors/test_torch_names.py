"""Small torch names the distributed suites call: ``equal``, ``bmm``, ``nonzero``,
``is_contiguous``, ``is_sparse`` (values and messages as torch gives them)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay_jax as tp


def test_equal():
    assert tp.equal(tp.ones(2), tp.ones(2)) is True
    assert tp.equal(tp.ones(2), tp.ones(3)) is False
    assert tp.equal(tp.tensor([1.0, 2.0]), tp.tensor([1.0, 3.0])) is False
    assert tp.ones(2).equal(tp.ones(2, dtype=tp.int32))  # compared after promotion


def test_bmm_value_and_gradient():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 3, 4)).astype(np.float32)
    b = rng.standard_normal((2, 4, 5)).astype(np.float32)
    ta, tb = tp.tensor(a, requires_grad=True), tp.tensor(b, requires_grad=True)
    out = tp.bmm(ta, tb)
    np.testing.assert_allclose(out.detach().numpy(), a @ b, rtol=1e-5)
    out.sum().backward()
    ones = np.ones((2, 3, 5), np.float32)
    np.testing.assert_allclose(ta.grad.numpy(), ones @ b.transpose(0, 2, 1), rtol=1e-5)
    np.testing.assert_allclose(tb.grad.numpy(), a.transpose(0, 2, 1) @ ones, rtol=1e-5)


def test_bmm_errors_are_torchs():
    with pytest.raises(RuntimeError, match="batch1 must be a 3D tensor"):
        tp.bmm(tp.ones((2, 3)), tp.ones((3, 2)))
    with pytest.raises(RuntimeError, match=r"batch2 tensor to be: \[2, 3\] but got: \[2, 2\]"):
        tp.bmm(tp.ones((2, 2, 3)), tp.ones((2, 2, 2)))


def test_nonzero():
    x = tp.tensor([[1, 0], [0, 3]])
    assert tp.nonzero(x).tolist() == [[0, 0], [1, 1]]
    assert x.nonzero().tolist() == [[0, 0], [1, 1]]
    assert [t.tolist() for t in tp.nonzero(x, as_tuple=True)] == [[0, 1], [0, 1]]
    assert tp.nonzero(tp.tensor(5)).shape == (1, 0)
    assert tp.nonzero(tp.tensor(0)).shape == (0, 0)
    assert [t.tolist() for t in tp.nonzero(tp.tensor(5), as_tuple=True)] == [[0]]


def test_layout_predicates():
    t = tp.ones((5, 5))
    view = t.narrow(1, 2, 2)
    # JAX arrays have no strides: every Tensor is contiguous (torch says False for a narrow)
    assert view.is_contiguous() and view.contiguous().is_contiguous()
    assert t.is_sparse is False


def test_legacy_typed_constructors_take_data_and_refuse_sizes():
    assert tp.LongTensor([1, 2, 4]).tolist() == [1, 2, 4]
    assert np.issubdtype(tp.LongTensor([1]).dtype, np.integer)
    assert tp.FloatTensor([1, 2]).dtype == np.float32
    with pytest.raises(TypeError, match="uninitialized tensor"):
        tp.LongTensor(2, 3)
    assert tp.long is tp.int64 and tp.float is tp.float32 and tp.int is tp.int32
