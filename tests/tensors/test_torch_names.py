"""Small torch names the distributed suites call: ``equal``, ``bmm``, ``nonzero``,
``is_contiguous``, ``is_sparse``, ``norm``, ``random_``, the legacy constructors and
dtype names (values and messages as torch gives them; torch itself as the oracle where
it is importable)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tensorplay_jax as tp


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


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


def test_legacy_typed_constructors_take_data_or_sizes():
    assert tp.LongTensor([1, 2, 4]).tolist() == [1, 2, 4]
    assert np.issubdtype(tp.LongTensor([1]).dtype, np.integer)
    assert tp.FloatTensor([1, 2]).dtype == np.float32
    # sizes: tensorplay's uninitialized Tensor; zeros here, as tp.empty
    sized = tp.LongTensor(2, 3)
    assert sized.shape == (2, 3) and np.issubdtype(sized.dtype, np.integer)
    assert sized.tolist() == [[0, 0, 0], [0, 0, 0]]
    assert tp.long is tp.int64 and tp.float is tp.float32 and tp.int is tp.int32


def test_dtype_names():
    assert tp.bool is tp.bool_ and tp.int16 is tp.short and tp.half is tp.float16
    names = (tp.uint8, tp.int8, tp.short)
    assert [np.dtype(d) for d in names] == [np.uint8, np.int8, np.int16]
    assert tp.zeros(2, dtype=tp.bool).dtype == np.bool_


_NORMS = [
    ((), {}),
    ((1,), {}),
    ((), {"dim": 1}),
    ((float("inf"),), {}),
    ((), {"p": "fro", "dim": (0, 1)}),
    ((), {"p": "nuc"}),
    ((), {"p": 2, "dim": 0, "keepdim": True}),
    ((3,), {}),
    ((0.5,), {"dim": -1}),
]


@pytest.mark.parametrize("args, kwargs", _NORMS, ids=[str(c) for c in _NORMS])
def test_norm_as_torchs(args, kwargs):
    x = np.array([[3.0, -4.0, 0.5], [1.0, 2.0, -2.0]], np.float32)
    got = tp.tensor(x).norm(*args, **kwargs).numpy()
    # by hand: the p-norm of the elements over dim (the nuclear norm: singular values)
    p = kwargs.get("p", args[0] if args else "fro")
    axis, keep = kwargs.get("dim"), bool(kwargs.get("keepdim", False))
    if p == "nuc":
        want = np.linalg.svd(x.astype(np.float64), compute_uv=False).sum()
    elif p == "fro":
        want = np.sqrt((x.astype(np.float64) ** 2).sum(axis=axis, keepdims=keep))
    elif math.isinf(p):
        want = np.abs(x).max(axis=axis, keepdims=keep)
    else:
        s = (np.abs(x.astype(np.float64)) ** p).sum(axis=axis, keepdims=keep)
        want = s ** (1 / p)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    torch = _torch()
    if torch is not None:
        ref = torch.tensor(x).norm(*args, **kwargs).numpy()
        np.testing.assert_allclose(got, ref, rtol=1e-5)
        assert got.shape == ref.shape


def test_norm_of_integers_is_torchs_error():
    with pytest.raises(RuntimeError, match="Expected a floating point or complex tensor"):
        tp.tensor([1, 2]).norm()
    with pytest.raises(RuntimeError, match="Expected a floating point or complex tensor"):
        tp.linalg.vector_norm(tp.tensor([1, 2]), dtype=tp.float32)  # torch refuses it too
    assert float(tp.norm(tp.tensor([3.0, 4.0]))) == 5.0


def test_random_bounds_and_spread():
    tp.manual_seed(0)
    x = tp.zeros(20000).random_(0, 10)  # torch's random_(from, to): [from, to - 1]
    counts = np.bincount(x.numpy().astype(int), minlength=10)
    assert counts.size == 10 and counts.min() > 1800  # about 2000 each
    assert set(np.unique(tp.zeros(500, dtype=tp.int32).random_(3).numpy())) == {0, 1, 2}
    assert set(tp.zeros(50, dtype=tp.long).random_(**{"from": 3, "to": 4}).tolist()) == {3}
    floats = tp.zeros(20000).random_().numpy()  # float32: integers up to 2**24
    assert floats.max() <= 2**24 and floats.max() > 2**23 and (floats == np.round(floats)).all()
    assert tp.zeros(2000, dtype=tp.uint8).random_().numpy().max() == 255
    assert tp.zeros(8, dtype=tp.bool).random_().dtype == np.bool_


def test_random_errors_are_torchs():
    with pytest.raises(RuntimeError, match="expects 'from' to be less than 'to'"):
        tp.zeros(3).random_(5, 2)
    with pytest.raises(RuntimeError, match="out of bounds for uint8"):
        tp.zeros(3, dtype=tp.uint8).random_(0, 300)


def test_torchs_legacy_idiom_runs():
    # ddp_under_dist_autograd_test.py: torch.LongTensor(10).random_(0, 10)
    x = tp.LongTensor(10).random_(0, 10)
    assert x.shape == (10,) and ((x >= 0) & (x < 10)).all()
