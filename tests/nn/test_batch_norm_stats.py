"""BatchNorm's running statistics in training: written without running the pending forward."""

from __future__ import annotations

import numpy as np

import tensorplay_jax as tp
from tensorplay_jax import nn
from tensorplay_jax.autograd import is_pending


def _batch() -> np.ndarray:
    return np.random.default_rng(5).standard_normal((4, 3, 2, 2)).astype(np.float32)


def _oracle(xn: np.ndarray, momentum: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """torch's update from zeros / ones, by hand: per channel mean and unbiased variance."""
    mean = xn.mean(axis=(0, 2, 3))
    var = xn.var(axis=(0, 2, 3), ddof=1)
    return momentum * mean, (1 - momentum) * 1.0 + momentum * var


def _pending_input(xn: np.ndarray) -> tp.Tensor:
    w = tp.ones(1, requires_grad=True)
    return tp.tensor(xn) * w  # a recorded operation: its output is pending


def test_a_training_batch_norm_leaves_the_forward_pending():
    bn = nn.BatchNorm2d(3)
    x = _pending_input(_batch())
    y = bn(x)
    assert is_pending(x) and is_pending(y)


def test_running_stats_read_before_the_forward_ran_are_the_updated_ones():
    xn = _batch()
    bn = nn.BatchNorm2d(3)
    y = bn(_pending_input(xn))
    mean, var = _oracle(xn)
    np.testing.assert_allclose(bn.running_mean.numpy(), mean, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(bn.running_var.numpy(), var, rtol=1e-5)
    assert not is_pending(y)  # reading the stats ran the forward they come from


def test_the_state_dict_holds_the_updated_stats():
    xn = _batch()
    bn = nn.BatchNorm2d(3)
    bn(_pending_input(xn))
    mean, var = _oracle(xn)
    state = bn.state_dict()
    np.testing.assert_allclose(np.asarray(state["running_mean"]), mean, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(np.asarray(state["running_var"]), var, rtol=1e-5)


def test_two_training_steps_compound_the_update():
    xn = _batch()
    bn = nn.BatchNorm2d(3)
    bn(_pending_input(xn))
    bn(_pending_input(2 * xn))  # reads the first step's pending stats
    m1, v1 = _oracle(xn)
    m2 = 0.9 * m1 + 0.1 * (2 * xn).mean(axis=(0, 2, 3))
    v2 = 0.9 * v1 + 0.1 * (2 * xn).var(axis=(0, 2, 3), ddof=1)
    np.testing.assert_allclose(bn.running_mean.numpy(), m2, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(bn.running_var.numpy(), v2, rtol=1e-5)


def test_a_write_after_the_pending_update_wins():
    bn = nn.BatchNorm2d(3)
    bn(_pending_input(_batch()))
    bn.running_mean.data = tp.full((3,), 7.0)
    bn.reset_running_stats()
    np.testing.assert_array_equal(bn.running_mean.numpy(), np.zeros(3, np.float32))
    np.testing.assert_array_equal(bn.running_var.numpy(), np.ones(3, np.float32))


def test_the_gradient_through_a_pending_batch_norm_matches_the_hand_formula():
    # d/dx sum(w_c * xhat) is zero for batch statistics (xhat sums to zero per channel);
    # weight the output instead: d/dgamma sum(xhat * g) = sum over the channel of xhat * g.
    xn = _batch()
    bn = nn.BatchNorm2d(3)
    x = _pending_input(xn)
    g = np.arange(48, dtype=np.float32).reshape(4, 3, 2, 2) / 48
    (bn(x) * tp.tensor(g)).sum().backward()
    mean = xn.mean(axis=(0, 2, 3), keepdims=True)
    xhat = (xn - mean) / np.sqrt(xn.var(axis=(0, 2, 3), keepdims=True) + bn.eps)
    np.testing.assert_allclose(bn.weight.grad.numpy(), (xhat * g).sum(axis=(0, 2, 3)), rtol=1e-4)
    np.testing.assert_allclose(bn.bias.grad.numpy(), g.sum(axis=(0, 2, 3)), rtol=1e-5)
    np.testing.assert_allclose(bn.running_mean.numpy(), _oracle(xn)[0], rtol=1e-5, atol=1e-7)
