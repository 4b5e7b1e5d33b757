"""``nn.L1Loss`` / ``F.l1_loss``: values for each reduction and the gradient, written out."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay_jax as tp
import tensorplay_jax.nn.functional as F

X = np.array([[1.0, -2.0, 3.0], [0.5, 0.0, -1.0]], np.float32)
T = np.array([[0.0, -2.0, 4.0], [1.0, 1.0, -3.0]], np.float32)


@pytest.mark.parametrize(
    ("reduction", "want"),
    [("none", np.abs(X - T)), ("mean", np.abs(X - T).mean()), ("sum", np.abs(X - T).sum())],
)
def test_values(reduction, want):
    out = tp.nn.L1Loss(reduction=reduction)(tp.tensor(X), tp.tensor(T))
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-6)


@pytest.mark.parametrize(("reduction", "scale"), [("mean", 1 / X.size), ("sum", 1.0)])
def test_gradient_is_the_sign_of_the_difference(reduction, scale):
    x = tp.tensor(X, requires_grad=True)
    F.l1_loss(x, tp.tensor(T), reduction=reduction).backward()
    np.testing.assert_allclose(x.grad.numpy(), np.sign(X - T) * scale, rtol=1e-6)  # 0 at equal


def test_bad_reduction_and_shapes():
    with pytest.raises(ValueError, match="reduction='avg' is not valid"):
        tp.nn.L1Loss(reduction="avg")
    with pytest.raises(ValueError, match="input shape"):
        F.l1_loss(tp.ones(2), tp.ones(3))
