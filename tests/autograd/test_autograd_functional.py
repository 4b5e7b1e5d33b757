"""``autograd.functional`` (torch's): Jacobians, Hessians and their products against JAX.

The oracle for every value is ``jax.jacrev`` / ``jax.hessian`` / ``jax.jvp`` /
``jax.vjp`` of the same function written with ``jax.numpy``; the structures returned
(a Tensor, a tuple over inputs, a tuple over outputs) are torch's.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tensorplay_jax as tp
from tensorplay_jax.autograd import functional as AF

pytestmark = pytest.mark.usefixtures("deferred")

RNG = np.random.default_rng(3)
A = RNG.standard_normal(3).astype(np.float32)
W = RNG.standard_normal((2, 3)).astype(np.float32)
VA = RNG.standard_normal(3).astype(np.float32)
VW = RNG.standard_normal((2, 3)).astype(np.float32)


def f_tp(x, w):
    return tp.tanh(w @ x) * x.sum()


def f_jax(x, w):
    return jnp.tanh(w @ x) * x.sum()


def s_tp(x, w):
    return (tp.tanh(w @ x) ** 2).sum() * x.sum()


def s_jax(x, w):
    return (jnp.tanh(w @ x) ** 2).sum() * x.sum()


def _close(got, want):
    np.testing.assert_allclose(got.numpy(), np.asarray(want), rtol=1e-5, atol=1e-6)


def test_jacobian_of_two_inputs():
    got = AF.jacobian(f_tp, (tp.tensor(A), tp.tensor(W)))
    want = jax.jacrev(f_jax, argnums=(0, 1))(A, W)
    assert isinstance(got, tuple) and [g.shape for g in got] == [(2, 3), (2, 2, 3)]
    for g, w in zip(got, want, strict=True):
        _close(g, w)
        assert not g.requires_grad


def test_jacobian_structures_follow_torch():
    x = tp.tensor(A)
    single = AF.jacobian(tp.sin, x)
    _close(single, jax.jacrev(jnp.sin)(A))
    many = AF.jacobian(lambda t: (t * 2, t.sum()), x)
    assert isinstance(many, tuple) and [m.shape for m in many] == [(3, 3), (3,)]
    both = AF.jacobian(lambda a, b: (a * b, b), (x, tp.tensor(VA)))
    assert [[t.shape for t in row] for row in both] == [[(3, 3), (3, 3)], [(3, 3), (3, 3)]]
    _close(both[1][0], np.zeros((3, 3)))  # the second output does not depend on input 0


def test_hessian_blocks():
    got = AF.hessian(s_tp, (tp.tensor(A), tp.tensor(W)))
    want = jax.hessian(s_jax, argnums=(0, 1))(A, W)
    for i in range(2):
        for j in range(2):
            np.testing.assert_allclose(got[i][j].numpy(), want[i][j], rtol=1e-4, atol=1e-5)
    one = AF.hessian(lambda t: (t**3).sum(), tp.tensor(A))
    _close(one, np.diag(6 * A))


def test_products():
    x, w = tp.tensor(A), tp.tensor(W)
    v = (tp.tensor(VA), tp.tensor(VW))
    out, jv = AF.jvp(f_tp, (x, w), v)
    _close(out, f_jax(A, W))
    _close(jv, jax.jvp(f_jax, (A, W), (VA, VW))[1])
    u = tp.tensor(np.array([0.5, -2.0], np.float32))
    _, vj = AF.vjp(f_tp, (x, w), u)
    want = jax.vjp(f_jax, A, W)[1](np.array([0.5, -2.0], np.float32))
    for g, ww in zip(vj, want, strict=True):
        _close(g, ww)
    hv_want = jax.jvp(jax.grad(s_jax, argnums=(0, 1)), (A, W), (VA, VW))[1]
    for fn in (AF.hvp, AF.vhp):  # the Hessian is symmetric: both give H v
        _, got = fn(s_tp, (x, w), v)
        for g, ww in zip(got, hv_want, strict=True):
            np.testing.assert_allclose(g.numpy(), ww, rtol=1e-4, atol=1e-5)


def test_create_graph_keeps_results_differentiable():
    x = tp.tensor(A, requires_grad=True)
    jac = AF.jacobian(lambda t: t**3, x, create_graph=True)
    assert jac.requires_grad
    (g,) = tp.autograd.grad(jac.sum(), x)  # d/dx sum(diag(3 x**2)) = 6 x
    _close(g, 6 * A)
    assert x.grad is None


def test_unused_inputs_and_strict_mode():
    x, w = tp.tensor(A), tp.tensor(W)
    _, vj = AF.vjp(lambda a, b: a * 2, (x, w), tp.ones(3))
    _close(vj[1], np.zeros((2, 3)))
    with pytest.raises(RuntimeError, match="independent of input 1"):
        AF.vjp(lambda a, b: a * 2, (x, w), tp.ones(3), strict=True)
    with pytest.raises(RuntimeError, match="v can only be None"):
        AF.vjp(lambda a: a * 2, x)
    with pytest.raises(TypeError, match="must be either a Tensor or a tuple of Tensors"):
        AF.jacobian(lambda a: a, [1.0])
    with pytest.raises(RuntimeError, match="single element"):
        AF.hessian(lambda a: a * 2, x)
