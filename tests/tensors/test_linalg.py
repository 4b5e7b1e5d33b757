"""``tp.linalg``: values against NumPy, gradients against closed forms or ``jax.grad`` of
``jnp`` written out independently, shapes and messages as torch has them."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tensorplay_jax as tp

RNG = np.random.default_rng(3)
A = (RNG.standard_normal((3, 3)) + 3 * np.eye(3)).astype(np.float32)
B = RNG.standard_normal((3, 3)).astype(np.float32)
V = RNG.standard_normal(3).astype(np.float32)
M = np.array([[1.0, -2.0], [3.0, 4.0]], np.float32)


@pytest.fixture(params=[True, False], ids=["deferred", "eager"])
def deferred(request):
    old = tp.autograd.set_deferred(request.param)
    yield request.param
    tp.autograd.set_deferred(old)


def _close(a, b, rtol=1e-5, atol=1e-5):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)


def _grad(f, x):
    t = tp.tensor(x, requires_grad=True)
    f(t).sum().backward()
    return t.grad.numpy()


def test_det_value_and_gradient(deferred):
    _close(tp.linalg.det(tp.tensor(A)).item(), np.linalg.det(A), rtol=1e-4)
    # d det(A) / dA = det(A) * inv(A)^T
    _close(_grad(tp.linalg.det, A), np.linalg.det(A) * np.linalg.inv(A).T, rtol=1e-4)


def test_inv_value_and_gradient(deferred):
    inv = np.linalg.inv(A)
    _close(tp.linalg.inv(tp.tensor(A)).numpy(), inv, rtol=1e-4)
    ones = np.ones((3, 3), np.float32)
    _close(_grad(tp.linalg.inv, A), -inv.T @ ones @ inv.T, rtol=1e-4)  # d sum(inv A)


def test_solve_vector_value_and_gradients(deferred):
    x = np.linalg.solve(A, V)
    _close(tp.linalg.solve(tp.tensor(A), tp.tensor(V)).numpy(), x, rtol=1e-4)
    a = tp.tensor(A, requires_grad=True)
    b = tp.tensor(V, requires_grad=True)
    tp.linalg.solve(a, b).sum().backward()
    lam = np.linalg.solve(A.T, np.ones(3, np.float32))  # d sum(x)/db = A^-T 1
    _close(b.grad.numpy(), lam, rtol=1e-4)
    _close(a.grad.numpy(), -np.outer(lam, x), rtol=1e-4)


def test_solve_batched_vectors_and_left_false():
    batch = np.stack([A, 2 * A])
    rhs = np.stack([V, V])  # shape of A without its last dimension: vectors, as in torch
    want = np.stack([np.linalg.solve(A, V), np.linalg.solve(2 * A, V)])
    _close(tp.linalg.solve(tp.tensor(batch), tp.tensor(rhs)).numpy(), want, rtol=1e-4)
    right = tp.linalg.solve(tp.tensor(A), tp.tensor(B), left=False).numpy()
    _close(right @ A, B, rtol=1e-4, atol=1e-4)  # X A = B


def test_multi_dot_value_and_gradients(deferred):
    c = RNG.standard_normal((3, 2)).astype(np.float32)
    ts = [tp.tensor(x, requires_grad=True) for x in (V, A, B, c)]
    out = tp.linalg.multi_dot(ts)
    _close(out.numpy(), V @ A @ B @ c, rtol=1e-4)
    out.sum().backward()
    want = jax.grad(lambda *xs: jnp.sum(xs[0] @ xs[1] @ xs[2] @ xs[3]), argnums=(0, 1, 2, 3))(
        V, A, B, c
    )
    for t, g in zip(ts, want, strict=True):
        _close(t.grad.numpy(), g, rtol=1e-4)


def test_multi_dot_errors_are_torchs():
    with pytest.raises(RuntimeError, match="expected at least 2 tensors but got 1"):
        tp.linalg.multi_dot([tp.ones(3)])
    with pytest.raises(RuntimeError, match=r"shapes \[3, 2\] and \[3, 2\] cannot be multiplied"):
        tp.linalg.multi_dot([tp.ones((3, 2)), tp.ones((3, 2))])


@pytest.mark.parametrize("ord", [2, 1, 3, math.inf, -math.inf, 0])
def test_vector_norm_values(ord):
    x = np.array([1.0, -2.0, 0.0, 2.0], np.float32)
    _close(tp.linalg.vector_norm(tp.tensor(x), ord).item(), np.linalg.norm(x, ord))


def test_vector_norm_gradient_and_zero_vector(deferred):
    _close(_grad(tp.linalg.vector_norm, V), V / np.linalg.norm(V))
    _close(_grad(tp.linalg.vector_norm, np.zeros(3, np.float32)), np.zeros(3))  # torch: 0


def test_norm_gradients_at_zero_entries_are_torchs():
    x = np.array([1.0, 0.0, -1.0], np.float32)
    _close(_grad(lambda t: tp.linalg.vector_norm(t, 1), x), [1.0, 0.0, -1.0])
    c = 1.0 / 2.0 ** (2.0 / 3.0)  # d ||x||_3 / dx_i = x_i |x_i| / ||x||_3^2
    _close(_grad(lambda t: tp.linalg.vector_norm(t, 3), x), [c, 0.0, -c])
    m = np.array([[1.0, 0.0], [0.0, 2.0]], np.float32)
    _close(_grad(lambda t: tp.linalg.matrix_norm(t, 1), m), [[0.0, 0.0], [0.0, 1.0]])


def test_vector_norm_dim_and_keepdim():
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    out = tp.linalg.vector_norm(tp.tensor(x), dim=1, keepdim=True)
    _close(out.numpy(), np.linalg.norm(x, axis=1, keepdims=True))


@pytest.mark.parametrize("ord", ["fro", "nuc", 2, -2, 1, -1, math.inf, -math.inf])
def test_matrix_norm_values(ord):
    _close(tp.linalg.matrix_norm(tp.tensor(M), ord).item(), np.linalg.norm(M, ord), rtol=1e-5)


def test_matrix_norm_gradient_frobenius_and_nuclear(deferred):
    _close(_grad(tp.linalg.matrix_norm, A), A / np.linalg.norm(A), rtol=1e-4)
    u, _, vt = np.linalg.svd(A)
    _close(_grad(lambda t: tp.linalg.matrix_norm(t, "nuc"), A), u @ vt, rtol=1e-3, atol=1e-4)


def test_norm_picks_vector_or_matrix():
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    _close(tp.linalg.norm(tp.tensor(x)).item(), np.linalg.norm(x.ravel()))
    _close(tp.linalg.norm(tp.tensor(x), ord=1).item(), np.linalg.norm(x, 1))  # matrix 1-norm
    _close(tp.linalg.norm(tp.tensor(x), dim=0).numpy(), np.linalg.norm(x, axis=0))
    assert tp.linalg.norm(tp.tensor(x), dim=(0, 1), keepdim=True).shape == (1, 1)
    with pytest.raises(RuntimeError, match=r"the input must be 1D or 2D\. Got 3D"):
        tp.linalg.norm(tp.ones((2, 3, 4)), ord=2)


def test_square_matrix_errors_are_torchs():
    for fn in (tp.linalg.det, tp.linalg.inv):
        with pytest.raises(RuntimeError, match="must be batches of square matrices"):
            fn(tp.ones((2, 3)))


def test_linalg_is_importable_as_a_module():
    from tensorplay_jax.linalg import multi_dot

    assert multi_dot is tp.linalg.multi_dot
