"""A grad-requiring Tensor handed to raw JAX/NumPy never loses its gradient silently."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tensorplay_jax as tp


@pytest.mark.parametrize(
    "call",
    [jnp.sin, jnp.sum, lambda t: jnp.dot(t, t), jax.jit(lambda t: t * 2)],
    ids=["sin", "sum", "dot", "jit"],
)
def test_jitted_jnp_raises_type_error_naming_apply(call):
    x = tp.ones(3, requires_grad=True)
    with pytest.raises(TypeError, match=r"tp\.apply"):
        call(x)


def test_jnp_asarray_raises_for_grad_tensor():
    x = tp.ones(3, requires_grad=True)
    with pytest.raises(TypeError, match=r"tp\.apply\(fn, tensor"):
        jnp.asarray(x)
    with pytest.raises(TypeError, match=r"tp\.apply"):
        np.asarray(x)


def test_plain_tensor_converts_explicitly():
    x = tp.ones(3)
    assert jnp.asarray(x).shape == (3,)
    assert np.asarray(x).tolist() == [1.0, 1.0, 1.0]
    with tp.no_grad():
        assert np.asarray(tp.ones(2, requires_grad=True)).shape == (2,)
    with pytest.raises(TypeError, match=r"tp\.apply"):
        jnp.sin(x)


def test_numpy_ufunc_defers_to_tensor():
    x = tp.ones(3, requires_grad=True)
    with pytest.raises(TypeError):
        np.sin(x)
    assert isinstance(np.ones(3) + x, tp.Tensor)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.uint8, np.bool_])
def test_from_numpy_keeps_the_values_and_dtype(dtype):
    a = (np.arange(6) % 3).reshape(2, 3).astype(dtype)
    t = tp.from_numpy(a)
    assert t.dtype == np.dtype(dtype) and t.shape == (2, 3) and not t.requires_grad
    np.testing.assert_array_equal(t.numpy(), a)


def test_from_numpy_copies_so_later_writes_to_the_array_are_not_seen():
    a = np.zeros(3, np.float32)
    t = tp.from_numpy(a)
    a[0] = 5.0
    np.testing.assert_array_equal(t.numpy(), [0.0, 0.0, 0.0])


@pytest.mark.parametrize(
    ("value", "words"),
    [([1.0, 2.0], "expected np.ndarray (got list)"), (np.array([object()]), "numpy.object_")],
)
def test_from_numpy_rejects_what_is_not_a_numeric_ndarray(value, words):
    with pytest.raises(TypeError, match=words.replace("(", r"\(").replace(")", r"\)")):
        tp.from_numpy(value)
