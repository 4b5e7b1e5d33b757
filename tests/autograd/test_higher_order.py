"""``create_graph=True``: gradients on the tape, differentiated again, against ``jax.grad``.

Every expected value comes from JAX differentiating a plain ``jax.numpy`` function
(or from a closed form), never from the tape. Each test runs with deferred recording
on and off (the ``deferred`` fixture).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tensorplay_jax as tp
from tensorplay_jax import nn
from tensorplay_jax.autograd import Function
from tests.autograd._custom_functions import Cube, CubeOnce

pytestmark = pytest.mark.usefixtures("deferred")

RNG = np.random.default_rng(7)


def _arr(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


UNARY = {
    "sin": (tp.sin, jnp.sin),
    "exp": (tp.exp, jnp.exp),
    "tanh": (tp.tanh, jnp.tanh),
    "sigmoid": (tp.sigmoid, jax.nn.sigmoid),
    "cube": (lambda t: t**3, lambda a: a**3),
    "softplus": (nn.functional.softplus, jax.nn.softplus),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_second_and_third_derivatives_of_elementwise_functions(name):
    ours, theirs = UNARY[name]
    a = _arr(5)
    x = tp.tensor(a, requires_grad=True)
    (g1,) = tp.autograd.grad(ours(x).sum(), x, create_graph=True)
    (g2,) = tp.autograd.grad(g1.sum(), x, create_graph=True)
    (g3,) = tp.autograd.grad(g2.sum(), x)

    def d(f):
        return jax.grad(lambda v: f(v).sum())

    d1 = d(theirs)
    d2 = d(d1)
    d3 = d(d2)
    np.testing.assert_allclose(g1.numpy(), d1(a), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(g2.numpy(), d2(a), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(g3.numpy(), d3(a), rtol=1e-4, atol=1e-4)
    assert g1.requires_grad and g1.grad_fn is not None
    assert not g3.requires_grad


def test_hessian_vector_product_of_a_network_equals_jax():
    w1, w2, xb, v1, v2 = _arr(3, 6), _arr(6, 2), _arr(4, 3), _arr(3, 6), _arr(6, 2)

    def loss(w1, w2):
        return (jnp.tanh(xb @ w1) @ w2).var(ddof=1) + (w1**2).sum() * 0.1  # torch: unbiased

    t1, t2 = tp.tensor(w1, requires_grad=True), tp.tensor(w2, requires_grad=True)
    out = (tp.tanh(tp.tensor(xb) @ t1) @ t2).var() + (t1**2).sum() * 0.1
    g1, g2 = tp.autograd.grad(out, [t1, t2], create_graph=True)
    h1, h2 = tp.autograd.grad((g1 * tp.tensor(v1)).sum() + (g2 * tp.tensor(v2)).sum(), [t1, t2])
    want = jax.jvp(jax.grad(loss, argnums=(0, 1)), (w1, w2), (v1, v2))[1]
    np.testing.assert_allclose(h1.numpy(), want[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(h2.numpy(), want[1], rtol=1e-4, atol=1e-5)


def test_linear_operations_have_second_derivatives():
    """Indexing, reshapes, transposes, sums and means record nothing they read (their
    backward is linear): the gradient still has a graph through them."""
    a = _arr(2, 3)

    def f(x):
        return (x[:, 1:] * x[:, :-1]).mean() + x.T.reshape(-1)[2] ** 2 + (x - x.sum(0)).sum()

    x = tp.tensor(a, requires_grad=True)
    (g,) = tp.autograd.grad(f(x), x, create_graph=True)
    (h,) = tp.autograd.grad((g * g).sum(), x)
    want = jax.grad(lambda v: (jax.grad(f)(v) ** 2).sum())(a)
    np.testing.assert_allclose(h.numpy(), want, rtol=1e-5, atol=1e-6)


def test_gradient_penalty_through_modules_equals_jax():
    """WGAN-GP's penalty: the norm of d(out)/d(input), trained through Linear, Tanh and
    LayerNorm; the parameters' gradients against a pure-JAX network."""
    tp.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.LayerNorm(8), nn.Linear(8, 1))
    x = tp.tensor(_arr(4, 3), requires_grad=True)
    (gx,) = tp.autograd.grad(net(x).sum(), x, create_graph=True)
    ((gx.norm(2, dim=1) - 1) ** 2).mean().backward()

    def mlp(p, xv):
        h = jnp.tanh(xv @ p["0.weight"].T + p["0.bias"])
        mu = h.mean(-1, keepdims=True)
        var = ((h - mu) ** 2).mean(-1, keepdims=True)
        h = (h - mu) / jnp.sqrt(var + 1e-5) * p["2.weight"] + p["2.bias"]
        return h @ p["3.weight"].T + p["3.bias"]

    def penalty(p, xv):
        g = jax.grad(lambda v: mlp(p, v).sum())(xv)
        return ((jnp.linalg.norm(g, axis=1) - 1) ** 2).mean()

    params = {k: np.asarray(v.numpy()) for k, v in net.named_parameters()}
    want_p, want_x = jax.grad(penalty, argnums=(0, 1))(params, x.numpy())
    for k, p in net.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), want_p[k], rtol=1e-4, atol=1e-5, err_msg=k)
    np.testing.assert_allclose(x.grad.numpy(), want_x, rtol=1e-4, atol=1e-5)


def test_a_meta_learning_step_differentiates_through_the_inner_update():
    """MAML: one inner SGD step made with create_graph, the outer loss at the adapted
    weights, its gradient with respect to the weights before the step."""
    w0, xa, ya, xb, yb = _arr(3, 1), _arr(5, 3), _arr(5, 1), _arr(5, 3), _arr(5, 1)
    lr = 0.1

    def mse(w, x, y):
        return ((x @ w - y) ** 2).mean()

    w = tp.tensor(w0, requires_grad=True)
    (g,) = tp.autograd.grad(((tp.tensor(xa) @ w - tp.tensor(ya)) ** 2).mean(), w, create_graph=True)
    adapted = w - lr * g
    ((tp.tensor(xb) @ adapted - tp.tensor(yb)) ** 2).mean().backward()
    want = jax.grad(lambda w: mse(w - lr * jax.grad(mse)(w, xa, ya), xb, yb))(w0)
    np.testing.assert_allclose(w.grad.numpy(), want, rtol=1e-5, atol=1e-6)


def test_backward_with_create_graph_leaves_grads_on_the_tape():
    """torch: ``.grad`` is the gradient Tensor with its graph; a second such backward adds
    to it out of place (the sum is recorded too)."""
    a = np.array([1.0, -2.0], np.float32)
    w = tp.tensor(a, requires_grad=True)
    (w**2 * 3).sum().backward(create_graph=True)
    first = w.grad
    assert first.grad_fn is not None
    np.testing.assert_allclose(first.numpy(), 6 * a)
    (w**2 * 3).sum().backward(create_graph=True)
    assert w.grad is not first and w.grad.grad_fn is not None
    np.testing.assert_allclose(w.grad.numpy(), 12 * a)
    (h,) = tp.autograd.grad((w.grad**2).sum(), w)
    np.testing.assert_allclose(h.numpy(), 2 * 144 * a)  # d/dw (12 w)^2 = 288 w


def test_a_cotangent_that_requires_grad_gives_a_jacobian_vector_product():
    """The double-backward trick: u -> J u from two reverse passes, the first with a
    cotangent ``v`` on the tape."""
    a, u = _arr(3), _arr(3)
    m = _arr(4, 3)

    def f(x):
        return jnp.sin(m @ x) * x.sum()

    x = tp.tensor(a, requires_grad=True)
    y = tp.sin(tp.tensor(m) @ x) * x.sum()
    v = tp.zeros(4, requires_grad=True)
    (vjp,) = tp.autograd.grad(y, x, v, create_graph=True)
    (jvp,) = tp.autograd.grad(vjp, v, tp.tensor(u))
    np.testing.assert_allclose(jvp.numpy(), jax.jvp(f, (a,), (u,))[1], rtol=1e-5, atol=1e-6)


def test_in_place_writes_inside_the_graph():
    x = tp.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    y.mul_(y)  # 4 x**2
    y.add_(x)  # 4 x**2 + x
    (g,) = tp.autograd.grad(y.sum(), x, create_graph=True)
    (h,) = tp.autograd.grad(g.sum(), x)
    np.testing.assert_allclose(g.numpy(), [9.0, 17.0])  # 8 x + 1
    np.testing.assert_allclose(h.numpy(), [8.0, 8.0])


def test_a_write_after_the_forward_is_refused_by_the_recorded_backward():
    x = tp.tensor([1.0, 2.0], requires_grad=True)
    y = x * 1.0
    z = y**2
    (g,) = tp.autograd.grad(z.sum(), x, create_graph=True)
    y2 = x * 1.0
    z2 = y2**2
    with tp.no_grad():
        y2.mul_(3.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        tp.autograd.grad(z2.sum(), x, create_graph=True)
    np.testing.assert_allclose(g.numpy(), [2.0, 4.0])


def test_a_custom_function_backward_is_recorded():
    x = tp.tensor([1.0, 2.0], requires_grad=True)
    (g,) = tp.autograd.grad(Cube.apply(x).sum(), x, create_graph=True)
    (h,) = tp.autograd.grad(g.sum(), x)
    np.testing.assert_allclose(g.numpy(), [3.0, 12.0])
    np.testing.assert_allclose(h.numpy(), [6.0, 12.0])


class ScaleBroadcast(Function):
    """``x * w`` for a vector ``x`` and a scalar-shaped ``w`` of shape (1,), whose backward
    returns ``w``'s gradient unsummed (torch sums it down to (1,) itself)."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * w

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return g * w, g * x  # the second: shape of x, summed to (1,) by the tape


def test_a_custom_gradient_summed_down_to_its_input_stays_on_the_tape():
    x = tp.tensor([1.0, 2.0, 3.0], requires_grad=True)
    w = tp.tensor([2.0], requires_grad=True)
    (gw,) = tp.autograd.grad((ScaleBroadcast.apply(x, w) ** 2).sum(), w, create_graph=True)
    (h,) = tp.autograd.grad(gw.sum(), x)  # gw = sum(2 x**2 w): d/dx = 4 x w
    np.testing.assert_allclose(gw.numpy(), [2 * 2 * 14.0])
    np.testing.assert_allclose(h.numpy(), 4 * np.array([1.0, 2.0, 3.0]) * 2)


def test_differentiating_a_once_differentiable_backward_raises_torchs_error():
    x = tp.tensor([1.0, 2.0], requires_grad=True)
    (g,) = tp.autograd.grad((CubeOnce.apply(x) * x).sum(), x, create_graph=True)
    np.testing.assert_allclose(g.numpy(), [1 + 3.0, 8 + 24.0])  # x**3 + 3 x**3
    with pytest.raises(RuntimeError, match="differentiate twice a function that was marked"):
        g.sum().backward()


def test_gradient_hooks_see_and_keep_tensors_on_the_tape():
    x = tp.tensor([1.0, 2.0], requires_grad=True)
    y = x**2
    seen = []

    def hook(g):
        seen.append(g.requires_grad)
        return g * x  # the replacement is on the tape too

    y.register_hook(hook)
    (g,) = tp.autograd.grad(y.sum(), x, create_graph=True)  # 2 x * x
    (h,) = tp.autograd.grad(g.sum(), x)
    assert seen == [False]  # the root's cotangent: ones, off the tape
    np.testing.assert_allclose(g.numpy(), [2.0, 8.0])
    np.testing.assert_allclose(h.numpy(), [4.0, 8.0])  # d/dx 2 x**2


def test_create_graph_keeps_the_graph_by_default():
    x = tp.tensor([1.0, 2.0], requires_grad=True)
    y = (x**3).sum()
    tp.autograd.grad(y, x, create_graph=True)
    (again,) = tp.autograd.grad(y, x)  # retain_graph defaulted to create_graph
    np.testing.assert_allclose(again.numpy(), [3.0, 12.0])
    with pytest.raises(RuntimeError, match="second time"):
        tp.autograd.grad(y, x)


def test_recorded_backwards_compile_once_per_shape(deferred):
    """The recorded backward of an operation that reads its operands (sin, mul) is compiled
    once per shape on both paths. A linear operation's (sum) is recorded from its
    first-order pullback and compiled once per program that made that pullback, as its
    first-order backward is: deferred, a recurring step's pullbacks come from the
    segment's program once the pattern is known, at a point that depends on what this
    process recorded before, so that one is checked on the reference path."""
    x = tp.tensor(_arr(4), requires_grad=True)
    tp.autograd.grad(tp.autograd.grad((tp.sin(x) * x).sum(), x, create_graph=True)[0].sum(), x)
    before = tp.autograd.trace_counts()
    for _ in range(3):
        x = tp.tensor(_arr(4), requires_grad=True)
        (g,) = tp.autograd.grad((tp.sin(x) * x).sum(), x, create_graph=True)
        tp.autograd.grad(g.sum(), x)
    after = tp.autograd.trace_counts()
    grew = {k for k in after if after[k] != before.get(k, 0) and "BackwardBackward" in k}
    checked = {"SinBackwardBackward", "MulBackwardBackward"}
    if not deferred:
        checked.add("SumBackwardBackward")
    assert not grew & checked, grew
    assert checked <= set(after)  # (they were traced, in the warm-up)


def test_gradients_of_intermediate_results():
    """torch's autograd.grad takes results of operations as inputs: the summed gradient
    of that result, without running the nodes that lead only elsewhere."""
    x = tp.tensor([1.0, 2.0], requires_grad=True)
    h = x * 3
    z = (h**2).sum() + (x * 5).sum()
    (gh,) = tp.autograd.grad(z, h)
    np.testing.assert_allclose(gh.numpy(), [6.0, 12.0])  # 2 h
    assert x.grad is None


class Refuses(Function):
    @staticmethod
    def forward(ctx, x):
        return x * 1.0

    @staticmethod
    def backward(ctx, g):
        raise AssertionError("this node leads to no input asked for and must not run")


def test_nodes_that_lead_to_no_input_do_not_run():
    x = tp.tensor([1.0, 2.0], requires_grad=True)
    w = tp.tensor([3.0, 4.0], requires_grad=True)
    z = (Refuses.apply(x) * w).sum()
    (gw,) = tp.autograd.grad(z, w)
    np.testing.assert_allclose(gw.numpy(), [1.0, 2.0])
    h = w * 2
    (h * Refuses.apply(x)).sum().backward(inputs=[h])
    np.testing.assert_allclose(h.grad.numpy(), [1.0, 2.0])
    assert w.grad is None and x.grad is None


def test_grad_options_of_torch():
    x = tp.tensor([1.0, 2.0], requires_grad=True)
    unused = tp.ones(3, requires_grad=True)
    gx, gu = tp.autograd.grad((x * 2).sum(), [x, unused], materialize_grads=True)
    np.testing.assert_allclose(gu.numpy(), np.zeros(3))
    np.testing.assert_allclose(gx.numpy(), [2.0, 2.0])
    with pytest.raises(ValueError, match="allow_unused to be True or not passed"):
        tp.autograd.grad((x * 2).sum(), [unused], materialize_grads=True, allow_unused=False)
    with pytest.raises(NotImplementedError, match="is_grads_batched"):
        tp.autograd.grad((x * 2).sum(), x, is_grads_batched=True)


def test_a_backward_computed_off_the_tape_refuses_to_be_differentiated():
    """A node whose gradient Python computes on arrays (a sparse embedding's) cannot be
    differentiated again: differentiating through it says so, never a silent zero."""
    weight = tp.tensor(_arr(5, 2), requires_grad=True)
    scale = tp.tensor([2.0, 3.0], requires_grad=True)
    rows = nn.functional.embedding(tp.tensor([0, 3]), weight, sparse=True)
    (gw,) = tp.autograd.grad((rows * scale).sum(), weight, create_graph=True)
    with pytest.raises(RuntimeError, match=r"derivative of .* is not implemented"):
        tp.autograd.grad(gw.to_dense().sum(), scale)
