"""Every operator's local gradient against ``jax.vjp`` of the same JAX code (the oracle)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tensorplay_jax as tp
from tests.autograd._oracle import check_vjp

R = np.random.default_rng(1)


def _n(*shape):
    return R.standard_normal(shape).astype(np.float32)


def _pos(*shape):
    return (np.abs(R.standard_normal(shape)) + 0.5).astype(np.float32)


UNARY = [
    ("neg", lambda x: -x, jnp.negative, _n(3, 4)),
    ("abs", abs, jnp.abs, _n(3, 4)),
    ("sqrt", tp.sqrt, jnp.sqrt, _pos(3, 4)),
    ("square", tp.square, jnp.square, _n(3, 4)),
    ("exp", tp.exp, jnp.exp, _n(3, 4)),
    ("log", tp.log, jnp.log, _pos(3, 4)),
    ("tanh", tp.tanh, jnp.tanh, _n(3, 4)),
    ("sin", tp.sin, jnp.sin, _n(3, 4)),
    ("cos", tp.cos, jnp.cos, _n(3, 4)),
    ("sigmoid", tp.sigmoid, jax.nn.sigmoid, _n(3, 4)),
    ("relu", tp.relu, jax.nn.relu, _n(3, 4)),
    ("softmax", lambda x: tp.softmax(x, dim=1), lambda x: jax.nn.softmax(x, axis=1), _n(3, 4)),
    ("softmax0", lambda x: x.softmax(0), lambda x: jax.nn.softmax(x, axis=0), _n(3, 4)),
    (
        "log_softmax",
        lambda x: tp.log_softmax(x, dim=-1),
        lambda x: jax.nn.log_softmax(x, axis=-1),
        _n(3, 4),
    ),
    ("clamp", lambda x: x.clamp(-0.5, 0.5), lambda x: jnp.clip(x, -0.5, 0.5), _n(3, 4)),
    ("clamp_min", lambda x: tp.clamp(x, min=0.1), lambda x: jnp.maximum(x, 0.1), _n(3, 4)),
    ("pow_scalar", lambda x: x**3, lambda x: x**3, _n(3, 4)),
    ("rpow", lambda x: 2.0**x, lambda x: 2.0**x, _n(3, 4)),
    ("scalar_arith", lambda x: (2 * x + 1 - x / 4) / 3, lambda x: (2 * x + 1 - x / 4) / 3, _n(5)),
    ("rsub_rdiv", lambda x: 1 - 2 / x, lambda x: 1 - 2 / x, _pos(5)),
    ("clone", lambda x: x.clone(), lambda x: x, _n(2, 2)),
    ("to_float32", lambda x: x.float(), lambda x: x, _n(2, 2)),
    # reductions
    ("sum_all", lambda x: x.sum(), jnp.sum, _n(3, 4)),
    ("sum_dim", lambda x: x.sum(dim=1), lambda x: x.sum(1), _n(3, 4)),
    ("sum_keep", lambda x: x.sum(0, keepdim=True), lambda x: x.sum(0, keepdims=True), _n(3, 4)),
    ("sum_axes", lambda x: x.sum(axis=(0, 2)), lambda x: x.sum((0, 2)), _n(2, 3, 4)),
    ("mean_dim", lambda x: tp.mean(x, -1), lambda x: x.mean(-1), _n(3, 4)),
    ("var", lambda x: x.var(1), lambda x: jnp.var(x, 1, ddof=1), _n(3, 4)),
    ("std", lambda x: x.std(), lambda x: jnp.std(x, ddof=1), _n(3, 4)),
    ("prod", lambda x: x.prod(1), lambda x: jnp.prod(x, 1), _n(3, 4)),
    ("max_all", lambda x: x.max(), jnp.max, _n(3, 4)),
    ("min_all", lambda x: tp.min(x), jnp.min, _n(3, 4)),
    ("amax_axes", lambda x: x.amax((0, 1)), lambda x: jnp.max(x, (0, 1)), _n(2, 3, 4)),
    ("max_dim", lambda x: x.max(dim=1), lambda x: (x.max(1), x.argmax(1)), _n(3, 4)),
    (
        "min_dim_keep",
        lambda x: tuple(x.min(0, keepdim=True)),
        lambda x: (x.min(0, keepdims=True), x.argmin(0, keepdims=True)),
        _n(3, 4),
    ),
    ("logsumexp", lambda x: x.logsumexp(1), lambda x: jax.nn.logsumexp(x, 1), _n(3, 4)),
    # shapes and indexing
    ("reshape", lambda x: x.reshape(4, 3), lambda x: x.reshape(4, 3), _n(3, 4)),
    ("view_tuple", lambda x: x.view((2, -1)), lambda x: x.reshape(2, -1), _n(3, 4)),
    ("transpose", lambda x: x.transpose(0, 2), lambda x: jnp.swapaxes(x, 0, 2), _n(2, 3, 4)),
    ("permute", lambda x: x.permute(2, 0, 1), lambda x: x.transpose(2, 0, 1), _n(2, 3, 4)),
    ("T", lambda x: x.T, lambda x: x.T, _n(3, 4)),
    ("flatten", lambda x: x.flatten(1), lambda x: x.reshape(2, 12), _n(2, 3, 4)),
    ("unsqueeze", lambda x: x.unsqueeze(1), lambda x: x[:, None], _n(3, 4)),
    ("squeeze", lambda x: x.squeeze(), jnp.squeeze, _n(3, 1, 4)),
    ("squeeze_dim", lambda x: x.squeeze(1), lambda x: x[:, 0], _n(3, 1, 4)),
    ("expand", lambda x: x.expand(2, -1, 4), lambda x: jnp.broadcast_to(x, (2, 3, 4)), _n(3, 1)),
    ("getitem_int", lambda x: x[1], lambda x: x[1], _n(3, 4)),
    ("getitem_slice", lambda x: x[1:, ::2], lambda x: x[1:, ::2], _n(3, 4)),
    ("getitem_neg", lambda x: x[..., -1], lambda x: x[..., -1], _n(3, 4)),
    ("getitem_none", lambda x: x[None, :, 1], lambda x: x[None, :, 1], _n(3, 4)),
    ("getitem_list", lambda x: x[[0, 2, 0]], lambda x: x[jnp.array([0, 2, 0])], _n(3, 4)),
    (
        "getitem_tensor",
        lambda x: x[tp.tensor([2, 1]), 1:3],
        lambda x: x[jnp.array([2, 1]), 1:3],
        _n(3, 4),
    ),
    (
        "getitem_mask",
        lambda x: x[np.array([True, False, True])],
        lambda x: x[jnp.array([0, 2])],
        _n(3, 4),
    ),
    ("narrow", lambda x: x.narrow(1, 1, 2), lambda x: x[:, 1:3], _n(3, 4)),
    ("narrow_neg", lambda x: tp.narrow(x, 0, -2, 2), lambda x: x[-2:], _n(3, 4)),
    ("split_int", lambda x: x.split(3, dim=1), lambda x: (x[:, :3], x[:, 3:]), _n(2, 5)),
    ("split_list", lambda x: tp.split(x, [1, 4], 1), lambda x: (x[:, :1], x[:, 1:]), _n(2, 5)),
    ("chunk", lambda x: x.chunk(2), lambda x: (x[:2], x[2:]), _n(3, 2)),
    ("unbind", lambda x: x.unbind(1), lambda x: tuple(x.T), _n(3, 2)),
    ("iter", lambda x: tuple(x), lambda x: tuple(x), _n(2, 3)),
]


@pytest.mark.parametrize("case", UNARY, ids=[c[0] for c in UNARY])
def test_unary_matches_jax(case):
    _, tp_fn, jax_fn, x = case
    check_vjp(tp_fn, jax_fn, [x])


BINARY = [
    ("add", lambda a, b: a + b, jnp.add, _n(3, 4), _n(4)),
    ("sub", lambda a, b: a - b, jnp.subtract, _n(3, 4), _n(3, 1)),
    ("mul", lambda a, b: a * b, jnp.multiply, _n(3, 4), _n(3, 4)),
    ("div", lambda a, b: a / b, jnp.divide, _n(3, 4), _pos(4)),
    ("pow", lambda a, b: a**b, jnp.power, _pos(3, 4), _n(3, 4)),
    ("matmul", lambda a, b: a @ b, jnp.matmul, _n(3, 4), _n(4, 5)),
    ("matmul_batched", tp.matmul, jnp.matmul, _n(2, 3, 4), _n(4, 2)),
    ("matvec", lambda a, b: a @ b, jnp.matmul, _n(3, 4), _n(4)),
    ("maximum", tp.maximum, jnp.maximum, _n(3, 4), _n(3, 4)),
    ("minimum", lambda a, b: a.min(b), jnp.minimum, _n(3, 4), _n(3, 4)),
    (
        "where",
        lambda a, b: tp.where(a > b, a, b * 2),
        lambda a, b: jnp.where(a > b, a, b * 2),
        _n(3, 4),
        _n(3, 4),
    ),
    (
        "cat",
        lambda a, b: tp.cat([a, b], dim=1),
        lambda a, b: jnp.concatenate([a, b], 1),
        _n(3, 4),
        _n(3, 2),
    ),
    (
        "stack",
        lambda a, b: tp.stack([a, b, a], dim=1),
        lambda a, b: jnp.stack([a, b, a], 1),
        _n(3, 4),
        _n(3, 4),
    ),
    ("add_alpha", lambda a, b: tp.add(a, b, alpha=3.0), lambda a, b: a + 3 * b, _n(4), _n(4)),
    (
        "index_put",
        lambda a, b: tp.tensors._indexing.index_put(a, (slice(None), 1), b),
        lambda a, b: a.at[:, 1].set(b),
        _n(3, 4),
        _n(3),
    ),
]


@pytest.mark.parametrize("case", BINARY, ids=[c[0] for c in BINARY])
def test_binary_matches_jax(case):
    _, tp_fn, jax_fn, a, b = case
    check_vjp(tp_fn, jax_fn, [a, b])


def test_reflected_operators_with_arrays_record():
    x = tp.tensor(_n(3), requires_grad=True)
    y = jnp.ones(3) * 2 + x  # jax.Array on the left: defers to Tensor.__radd__
    z = np.full(3, 3.0, np.float32) * y  # NumPy array on the left: __array_ufunc__ = None
    assert isinstance(z, tp.Tensor) and z.requires_grad
    z.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full(3, 3.0))


def test_setitem_rebinds_and_records():
    x = tp.tensor(_n(3, 4), requires_grad=True)
    v = tp.tensor(_n(4), requires_grad=True)
    y = x * 1.0
    y[1] = v * 2
    y.sum().backward()
    expected_x = np.ones((3, 4), np.float32)
    expected_x[1] = 0
    np.testing.assert_allclose(x.grad.numpy(), expected_x)
    np.testing.assert_allclose(v.grad.numpy(), np.full(4, 2.0))


def test_setitem_on_grad_leaf_raises():
    x = tp.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad is being used"):
        x[0] = 5.0
    with tp.no_grad():
        x[0] = 5.0
    assert x.requires_grad and x.tolist() == [5.0, 1.0, 1.0]


def test_comparisons_have_no_gradient():
    x = tp.tensor([1.0, 2.0, 3.0], requires_grad=True)
    for r in (x == 2, x != 2, x < 2, x <= 2, x > 2, x >= 2):
        assert r.dtype == np.bool_ and not r.requires_grad
    assert (x > 1.5).tolist() == [False, True, True]
    assert ((x > 1) & (x < 3)).tolist() == [False, True, False]
    assert (~(x > 1)).tolist() == [True, False, False]
    assert x.argmax().item() == 2 and not x.argmax().requires_grad


def test_composite_matches_jax_grad():
    """A small network written with Tensor operators equals jax.grad of the same JAX code."""
    xs, w1, b1, w2 = _n(8, 5), _n(5, 16), _n(16), _n(16, 3)
    labels = np.array([0, 2, 1, 1, 0, 2, 2, 1])

    def jax_loss(w1, b1, w2):
        h = jnp.tanh(xs @ w1 + b1)
        h = jnp.concatenate([jax.nn.relu(h[:, :8]), jax.nn.sigmoid(h[:, 8:])], axis=1)
        logp = jax.nn.log_softmax(h @ w2, axis=1)
        return -logp[jnp.arange(8), labels].mean() + 0.01 * (w1**2).sum()

    params = [tp.tensor(a, requires_grad=True) for a in (w1, b1, w2)]
    tw1, tb1, tw2 = params
    h = tp.tanh(tp.tensor(xs) @ tw1 + tb1)
    a, b = h.split(8, dim=1)
    h = tp.cat([a.relu(), b.sigmoid()], dim=1)
    logp = (h @ tw2).log_softmax(dim=1)
    loss = -logp[tp.arange(8), labels].mean() + 0.01 * (tw1**2).sum()
    loss.backward()
    expected = jax.grad(jax_loss, argnums=(0, 1, 2))(w1, b1, w2)
    np.testing.assert_allclose(loss.item(), jax_loss(w1, b1, w2), rtol=1e-5)
    for p, g in zip(params, expected, strict=True):
        np.testing.assert_allclose(p.grad.numpy(), g, rtol=1e-4, atol=1e-6)


def _finite_difference(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = eps
        g[i] = (f(x + e) - f(x - e)) / (2 * eps)
    return g


@pytest.mark.parametrize(
    "name, fn",
    [
        ("tanh_matmul", lambda t: (tp.tanh(t @ t.T) * t.sum(1)).sum()),
        ("softmax_log", lambda t: (t.softmax(1) * t.exp()).log().mean()),
        ("index_cat_max", lambda t: tp.cat([t[:, 1:], t[:, :1] ** 2], 1).max(dim=1).values.sum()),
    ],
)
def test_finite_differences_float64(name, fn):
    with jax.enable_x64(True):
        x0 = np.random.default_rng(3).standard_normal((3, 4))

        def f(x):
            with tp.no_grad():
                return fn(tp.tensor(x, dtype=jnp.float64)).item()

        t = tp.tensor(x0, dtype=jnp.float64, requires_grad=True)
        assert t.dtype == np.float64
        fn(t).backward()
        np.testing.assert_allclose(t.grad.numpy(), _finite_difference(f, x0), rtol=1e-6, atol=1e-8)
