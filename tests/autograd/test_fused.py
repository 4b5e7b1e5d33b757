"""The fused backward: a recurring graph shape runs as one compiled call, same gradients."""

from __future__ import annotations

import numpy as np

import tensorplay_jax as tp
from tensorplay_jax.autograd import _fused, _known, trace_counts


def _fused_compiles() -> int:
    """Compilations of a fused backward, alone or with its pending forward (``_lazy``)."""
    counts = trace_counts()
    return counts.get("<fused backward>", 0) + counts.get("<fused forward-backward>", 0)


def _step(x, w):
    w.grad = None
    ((x @ w).relu() * 2.0).sum().backward()
    return w.grad.numpy()


def test_recurring_graph_fuses_with_the_same_gradient():
    x = tp.tensor(np.arange(6, dtype=np.float32).reshape(2, 3) - 2.0)
    w = tp.tensor(np.ones((3, 4), np.float32) * 0.5, requires_grad=True)
    xn = x.numpy()
    mask = (xn @ w.numpy()) > 0
    expected = xn.T @ (2.0 * mask)  # d/dw sum(2 relu(x w))
    before = _fused_compiles()
    for _ in range(_fused.FUSE_AFTER + 3):
        np.testing.assert_allclose(_step(x, w), expected, rtol=1e-6)
    assert _fused_compiles() == before + 1  # compiled once


def test_graphs_of_new_shapes_never_compile_fused():
    _fused._seen.clear()  # every shape below is new to this process, whatever ran before
    _known._pending_plans.clear()
    before = _fused_compiles()
    x = tp.ones(3, requires_grad=True)
    for n in range(1, 8):  # a chain of n multiplications: a new shape each time
        y = x
        for _ in range(n):
            y = y * 1.5
        x.grad = None
        y.sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), np.full(3, 1.5**n), rtol=1e-5)
    assert _fused_compiles() == before


def test_fused_steps_accumulate_into_grad_including_a_grad_set_between_them():
    x = tp.tensor(np.arange(6, dtype=np.float32).reshape(2, 3) - 2.0)
    w = tp.tensor(np.ones((3, 4), np.float32) * 0.5, requires_grad=True)
    xn = x.numpy()
    one = xn.T @ (2.0 * ((xn @ w.numpy()) > 0))  # d/dw sum(2 relu(x w)), by hand
    steps = _fused.FUSE_AFTER + 2  # the last ones run fused
    for _ in range(steps):
        ((x @ w).relu() * 2.0).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), steps * one, rtol=1e-6)
    w.grad = tp.tensor(np.full((3, 4), 10.0, np.float32))
    ((x @ w).relu() * 2.0).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), 10.0 + one, rtol=1e-6)
