"""tp.apply / @tp.function: one node per lifted function, pytrees, static args, no retracing."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tensorplay_jax as tp
from tensorplay_jax.autograd import trace_counts
from tensorplay_jax.autograd.speedups._fused import FUSE_AFTER


def _block(params, x, *, scale):
    h = jnp.tanh(x @ params["w"] + params["b"])
    return {"out": h * scale, "norm": jnp.sum(h**2), "argmax": jnp.argmax(h, axis=-1)}


def test_apply_pytrees_one_node_matches_jax_grad():
    rng = np.random.default_rng(0)
    w, b, x = (rng.standard_normal(s).astype(np.float32) for s in [(4, 3), (3,), (5, 4)])
    params = {"w": tp.tensor(w, requires_grad=True), "b": tp.tensor(b, requires_grad=True)}
    res = tp.apply(_block, params, tp.tensor(x), scale=2.0)
    assert set(res) == {"out", "norm", "argmax"}
    assert res["out"].grad_fn is res["norm"].grad_fn  # one node for the whole block
    assert res["out"].grad_fn.name == "_blockBackward"
    assert not res["argmax"].requires_grad
    (res["out"].sum() + res["norm"]).backward()

    def loss(w, b):
        r = _block({"w": w, "b": b}, x, scale=2.0)
        return r["out"].sum() + r["norm"]

    gw, gb = jax.grad(loss, argnums=(0, 1))(w, b)
    np.testing.assert_allclose(params["w"].grad.numpy(), gw, rtol=1e-5)
    np.testing.assert_allclose(params["b"].grad.numpy(), gb, rtol=1e-5)


def test_function_decorator_and_mixed_inputs():
    @tp.function
    def f(a, b, arr):
        return jnp.sum(jnp.sin(a) * b + arr)

    a = tp.tensor([0.0, 1.0], requires_grad=True)
    b = tp.tensor([2.0, 3.0])  # no grad: gets no gradient, no edge
    out = f(a, b, np.ones(2, np.float32))
    out.backward()
    np.testing.assert_allclose(a.grad.numpy(), np.cos([0.0, 1.0]) * [2.0, 3.0], rtol=1e-6)
    assert b.grad is None and f.__wrapped__ is not None
    assert len(out.grad_fn.next_edges) == 1


def test_apply_without_grad_records_nothing():
    out = tp.apply(jnp.sum, tp.ones(3))
    assert not out.requires_grad and out.grad_fn is None
    with tp.no_grad():
        assert tp.apply(jnp.sum, tp.ones(3, requires_grad=True)).grad_fn is None


def test_apply_rejects_unhashable_static_leaf():
    class Unhashable:
        __hash__ = None

    with pytest.raises(TypeError, match=r"tp\.apply: argument leaf .* is neither a Tensor/array"):
        tp.apply(lambda x, u: x, tp.ones(1), Unhashable())


def _counted(x, w):
    return jnp.tanh(x @ w).sum()


def test_second_call_does_not_retrace_forward_or_backward():
    w = tp.randn(4, 3, requires_grad=True)
    for _ in range(FUSE_AFTER):  # warm up, up to the fused backward of a recurring graph
        tp.apply(_counted, tp.randn(2, 4), w).backward()
        (tp.randn(5, 4) * w.sum()).sum().backward()  # warm the built-in ops too
    before = trace_counts()
    for _ in range(3):
        tp.apply(_counted, tp.randn(2, 4), w).backward()  # new values, same shapes
        (tp.randn(5, 4) * w.sum()).sum().backward()
    assert trace_counts() == before
    # a new shape: traced for its output's shape, then once inside its segment's
    # program (a first sight of a new operation compiles the segment at once)
    tp.apply(_counted, tp.randn(7, 4), w).backward()
    after = trace_counts()
    assert after["_countedBackward"] == before["_countedBackward"] + 2


def test_scalar_operands_do_not_retrace():
    x = tp.ones(3, requires_grad=True)
    for _ in range(FUSE_AFTER):  # warm up, up to the fused program of a recurring step
        (x * 2.0).sum().backward()
    before = trace_counts()["MulBackward"]
    for s in (3.0, 4.5, -1.0):
        (x * s).sum().backward()
    assert trace_counts()["MulBackward"] == before
    np.testing.assert_allclose(x.grad.numpy(), [2.0 * FUSE_AFTER + 6.5] * 3)


def test_apply_inside_jax_transform_records_nothing():
    w = tp.ones(3, requires_grad=True)

    def loss(v):
        out = tp.apply(lambda a, b: jnp.sum(a * b), tp.Tensor(v), w)
        assert out.grad_fn is None  # JAX differentiates here, the tape stays out
        return out.value

    np.testing.assert_allclose(jax.grad(loss)(jnp.arange(3.0)), [1.0, 1.0, 1.0])


def test_dict_outputs_do_not_retrace():
    w = tp.tensor(np.ones((4, 3), np.float32), requires_grad=True)
    x = tp.tensor(np.ones((5, 4), np.float32))

    def once():
        res = tp.apply(_block, {"w": w, "b": tp.zeros(3)}, x, scale=1.5)
        (res["out"].sum() + res["norm"]).backward()

    for _ in range(FUSE_AFTER):  # warm up, up to the fused backward of a recurring graph
        once()
    before = trace_counts()
    once()
    once()
    assert trace_counts() == before


def test_a_recorded_pullback_is_held_flat_and_gives_jax_vjp_gradient():
    """A node holds its pullback as one flat tuple (tree structure and residuals), not as
    ``jax.vjp``'s object tree; the gradient through it is ``jax.vjp``'s."""
    from tensorplay_jax.autograd._cache import Pullback

    old = tp.autograd.set_deferred(False)  # the node gets its pullback at once
    try:
        x = tp.tensor([0.5, 1.0, 2.0], requires_grad=True)
        y = tp.sin(x) * x
        held = type(y.grad_fn.vjp)
        y.sum().backward()
    finally:
        tp.autograd.set_deferred(old)
    assert held is Pullback
    v = np.array([0.5, 1.0, 2.0], np.float32)
    _, pb = jax.vjp(lambda a: jnp.sin(a) * a, v)
    np.testing.assert_allclose(x.grad.numpy(), pb(np.ones(3, np.float32))[0], rtol=1e-6)
