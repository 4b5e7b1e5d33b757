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
