"""F.linear's hand-written backward: jax.vjp's gradients, no residual copies, torch's errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tensorplay_jax as tp
from tensorplay_jax.autograd import trace_counts
from tensorplay_jax.nn import functional as F


def _oracle(x, w, b, ct):
    def f(x, w, b):
        y = x @ w.T
        return y if b is None else y + b

    return jax.vjp(f, x, w, b)[1](ct)


@pytest.mark.parametrize(
    ("x_shape", "bias", "dtype", "x_grad"),
    [
        ((5, 4), True, np.float32, True),
        ((2, 5, 4), True, np.float32, True),  # leading dimensions are flattened for dW
        ((4,), False, np.float32, True),  # one sample, no bias
        ((5, 4), True, np.float32, False),  # a stage's first layer: the input needs no grad
        ((5, 4), True, np.complex64, True),  # a transpose, no conjugation (as jax.vjp)
    ],
)
def test_linear_gradients_match_jax_vjp(x_shape, bias, dtype, x_grad):
    rng = np.random.default_rng(0)

    def draw(*shape):
        a = rng.standard_normal(shape)
        if dtype is np.complex64:
            a = a + 1j * rng.standard_normal(shape)
        return a.astype(dtype)

    xv, wv, bv = draw(*x_shape), draw(3, 4), draw(3) if bias else None
    x = tp.tensor(xv, requires_grad=x_grad)
    w = tp.tensor(wv, requires_grad=True)
    b = tp.tensor(bv, requires_grad=True) if bias else None
    y = F.linear(x, w, b)
    ct = draw(*y.shape)
    y.backward(tp.tensor(ct))
    want = _oracle(jnp.asarray(xv), jnp.asarray(wv), None if bv is None else jnp.asarray(bv), ct)
    got = [x.grad, w.grad, b.grad if bias else None]
    for g, ref, needed in zip(got, want, [x_grad, True, bias], strict=True):
        if not needed:
            assert g is None
            continue
        assert g.dtype == ref.dtype
        np.testing.assert_allclose(g.numpy(), np.asarray(ref), rtol=1e-5, atol=1e-5)


def test_linear_node_keeps_the_operands_themselves():
    x = tp.randn(8, 4, requires_grad=True)
    layer = tp.nn.Linear(4, 3)
    y = layer(x)
    y.numpy()  # runs the deferred forward (autograd.speedups._lazy): the node gets its pullback
    kept = y.grad_fn.vjp.args  # the pullback's residuals
    assert kept[0] is x._value and kept[1] is layer.weight._value
    assert kept[2] is layer.bias._value


def test_linear_backward_compiles_once_per_shape():
    layer = tp.nn.Linear(4, 3)
    x = tp.randn(6, 4, requires_grad=True)
    layer(x).sum().backward()
    before = trace_counts().get("<backward>", 0)
    layer(tp.randn(6, 4, requires_grad=True)).sum().backward()
    assert trace_counts().get("<backward>", 0) == before


def test_linear_weight_written_in_place_before_backward_raises():
    layer = tp.nn.Linear(4, 3)
    y = layer(tp.randn(2, 4))
    with tp.no_grad():
        layer.weight.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
