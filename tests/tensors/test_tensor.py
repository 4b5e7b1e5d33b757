"""Tensor basics: factories, dtype rules, properties, repr, hashing, grad mode, conversions."""

import jax.numpy as jnp
import numpy as np
import pytest

import tensorplay_jax as tp


def test_factories_shapes_and_dtypes():
    assert tp.tensor([1.0, 2.0]).dtype == np.float32
    assert tp.tensor([1, 2]).dtype in (np.int32, np.int64)
    assert tp.tensor(np.ones(2, np.float16)).dtype == np.float16
    assert tp.tensor([1, 2], dtype=tp.float32).dtype == np.float32
    assert tp.randn(2, 3).shape == (2, 3) and tp.randn((2, 3)).shape == (2, 3)
    assert tp.rand([4]).shape == (4,)
    assert tp.ones(2, 2).tolist() == [[1.0, 1.0], [1.0, 1.0]]
    assert tp.zeros(3, dtype=tp.int32).tolist() == [0, 0, 0]
    assert tp.arange(3).tolist() == [0, 1, 2]
    assert tp.arange(1, 7, 2).tolist() == [1, 3, 5]
    assert tp.arange(0.0, 1.0, 0.25).dtype == np.float32
    assert tp.full((2,), 7.0).tolist() == [7.0, 7.0]
    assert tp.eye(2).tolist() == [[1.0, 0.0], [0.0, 1.0]]
    x = tp.randn(3, 2)
    assert tp.zeros_like(x).shape == (3, 2) and tp.ones_like(x).dtype == x.dtype
    r = tp.randint(0, 5, (100,))
    assert r.numpy().min() >= 0 and r.numpy().max() < 5


def test_requires_grad_flags():
    for make in (tp.randn, tp.rand, tp.ones, tp.zeros):
        assert make(2, requires_grad=True).requires_grad
        assert not make(2).requires_grad
    assert tp.arange(3.0, requires_grad=True).requires_grad
    assert tp.tensor([1.0], requires_grad=True).is_leaf
    with pytest.raises(RuntimeError, match="Only Tensors of floating point"):
        tp.tensor([1, 2], requires_grad=True)
    y = tp.ones(2, requires_grad=True) * 2
    assert not y.is_leaf and y.grad_fn is not None and y.grad_fn.name == "MulBackward"
    with pytest.raises(RuntimeError, match="only change requires_grad flags of leaf"):
        y.requires_grad = False
    z = tp.ones(2).requires_grad_()
    assert z.requires_grad


def test_manual_seed_reproducible():
    tp.manual_seed(123)
    a, b = tp.randn(5), tp.rand(5)
    tp.manual_seed(123)
    np.testing.assert_array_equal(a.numpy(), tp.randn(5).numpy())
    np.testing.assert_array_equal(b.numpy(), tp.rand(5).numpy())
    assert tp.initial_seed() == 123
    assert not np.array_equal(a.numpy(), tp.randn(5).numpy())


def test_hash_by_identity_and_elementwise_eq():
    a, b = tp.ones(2), tp.ones(2)
    d = {a: "a", b: "b"}
    assert d[a] == "a" and d[b] == "b" and len({a, b, a}) == 2
    assert (a == b).tolist() == [True, True]
    assert (a == None) is False  # noqa: E711
    assert a != "x"


def test_properties_and_conversions():
    x = tp.tensor([[1.0, 2.0, 3.0]], requires_grad=True)
    assert x.shape == (1, 3) and x.ndim == 2 and x.dim() == 2 and x.numel() == 3
    assert x.size() == (1, 3) and x.size(1) == 3 and len(x) == 1
    assert isinstance(x.value, type(jnp.ones(1)))
    assert x.numpy().tolist() == [[1.0, 2.0, 3.0]]
    assert tp.tensor(2.5).item() == 2.5 and float(tp.tensor([1.5])) == 1.5
    assert int(tp.tensor(3)) == 3 and [10, 20, 30][tp.tensor(1)] == 20
    with pytest.raises(RuntimeError, match="cannot be converted to a Python scalar"):
        x.item()
    with pytest.raises(RuntimeError, match="ambiguous"):
        bool(x)
    assert x.device is not None
    assert x.to(tp.float16).dtype == np.float16 and x.to(tp.float16).requires_grad


def test_detach_and_data():
    x = tp.ones(3, requires_grad=True)
    y = x * 2
    d = y.detach()
    assert d.is_leaf and not d.requires_grad and d.tolist() == [2.0, 2.0, 2.0]
    x.data = tp.zeros(3)
    assert x.requires_grad and x.is_leaf and x.tolist() == [0.0, 0.0, 0.0]
    assert not x.data.requires_grad


def test_repr():
    assert repr(tp.tensor([1.0, 2.0])) == "tensor([1., 2.])"
    assert repr(tp.tensor([1.0, 2.0], requires_grad=True)) == (
        "tensor([1., 2.], requires_grad=True)"
    )
    assert repr(tp.tensor([1.0]) * tp.tensor([2.0], requires_grad=True)) == (
        "tensor([2.], grad_fn=<MulBackward>)"
    )
    assert repr(tp.tensor([1, 2])) == "tensor([1, 2])"
    assert "dtype=float16" in repr(tp.ones(1, dtype=tp.float16))


def test_repr_of_an_empty_tensor_names_its_size_and_a_dtype_its_elements_cannot_show():
    # torch's: tensor([]), tensor([], size=(2, 0)), tensor([], dtype=torch.int64)
    assert repr(tp.zeros(0)) == "tensor([])"
    assert repr(tp.zeros(2, 0)) == "tensor([], size=(2, 0))"
    assert repr(tp.zeros(0, dtype=tp.int32)) == "tensor([], dtype=int32)"
    assert repr(tp.zeros(2, 0, dtype=tp.bool)) == "tensor([], size=(2, 0), dtype=bool)"


def test_no_grad_and_grad_mode():
    x = tp.ones(2, requires_grad=True)
    assert tp.is_grad_enabled()
    with tp.no_grad():
        assert not tp.is_grad_enabled()
        assert not (x * 2).requires_grad
        with tp.enable_grad():
            assert (x * 2).requires_grad
    assert tp.is_grad_enabled()

    @tp.no_grad()
    def f(t):
        return t * 2

    assert not f(x).requires_grad and tp.is_grad_enabled()
    with tp.set_grad_enabled(False):
        assert not (x + 1).requires_grad
    assert tp.is_grad_enabled()


def test_grad_setter_checks_shape():
    x = tp.ones(3, requires_grad=True)
    x.grad = np.ones(3, np.float32)
    assert x.grad.tolist() == [1.0, 1.0, 1.0]
    with pytest.raises(RuntimeError, match="assigned grad has shape"):
        x.grad = tp.ones(2)
    x.grad = None
    assert x.grad is None


def test_pickle_and_deepcopy_as_leaves():
    import copy
    import pickle

    x = tp.tensor([1.0, 2.0], requires_grad=True)
    y = pickle.loads(pickle.dumps(x * 2))
    assert y.is_leaf and y.requires_grad and y.tolist() == [2.0, 4.0]
    z = copy.deepcopy(x)
    assert z is not x and z.requires_grad and z.tolist() == [1.0, 2.0]


def test_comparison_methods_match_numpy():
    a, b = np.array([1.0, 2.0, 3.0], np.float32), np.array([1.0, 0.0, 4.0], np.float32)
    x, y = tp.tensor(a), tp.tensor(b)
    for name, want in [("eq", a == b), ("ne", a != b), ("lt", a < b), ("le", a <= b),
                       ("gt", a > b), ("ge", a >= b)]:  # fmt: skip
        np.testing.assert_array_equal(getattr(x, name)(y).numpy(), want, err_msg=name)
    assert x.eq(y).sum().item() == 1  # the tutorials' accuracy count
