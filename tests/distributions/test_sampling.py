"""Samples of the distributions: shapes, moments (against the closed forms), the
reparameterised gradients, reproducibility by seed, and argument errors."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay_jax as tp
from tensorplay_jax.distributions import Bernoulli, Normal, Uniform, kl_divergence

N = 40_000


def test_normal_rsample_has_its_moments_and_the_reparameterised_gradient():
    tp.manual_seed(0)
    loc = tp.tensor([1.0, -2.0], requires_grad=True)
    scale = tp.tensor([0.5, 3.0], requires_grad=True)
    x = Normal(loc, scale).rsample((N,))
    assert x.shape == (N, 2)
    v = x.detach().numpy()
    assert (np.abs(v.mean(0) - [1.0, -2.0]) < 4 * np.array([0.5, 3.0]) / np.sqrt(N)).all()
    np.testing.assert_allclose(v.std(0), [0.5, 3.0], rtol=0.02)
    x.sum().backward()
    np.testing.assert_allclose(loc.grad.numpy(), [N, N])  # d(loc + scale * eps)/d loc
    eps = (v - np.array([1.0, -2.0])) / np.array([0.5, 3.0])
    np.testing.assert_allclose(scale.grad.numpy(), eps.sum(0), rtol=1e-3, atol=1e-2)


def test_samples_are_reproducible_by_seed_and_carry_no_gradient():
    loc = tp.zeros(3, requires_grad=True)
    tp.manual_seed(4)
    a = Normal(loc, 1.0).sample((2,))
    tp.manual_seed(4)
    b = Normal(loc, 1.0).sample((2,))
    assert a.tolist() == b.tolist() and not a.requires_grad and a.shape == (2, 3)


def test_bernoulli_and_uniform_samples():
    tp.manual_seed(1)
    coins = Bernoulli(probs=tp.tensor([0.2, 0.9])).sample((N,)).numpy()
    assert set(np.unique(coins)) <= {0.0, 1.0} and coins.dtype == np.float32
    np.testing.assert_allclose(coins.mean(0), [0.2, 0.9], atol=0.01)
    u = Uniform(tp.tensor([-1.0, 2.0]), tp.tensor([1.0, 2.5])).sample((N,)).numpy()
    assert (u[:, 0] >= -1).all() and (u[:, 0] < 1).all() and (u[:, 1] >= 2).all()
    np.testing.assert_allclose(u.mean(0), [0.0, 2.25], atol=0.02)


def test_bad_parameters_and_unknown_pairs_raise():
    with pytest.raises(ValueError, match="GreaterThan"):
        Normal(0.0, tp.tensor([1.0, -1.0]), validate_args=True)
    with pytest.raises(ValueError, match="Interval"):
        Bernoulli(probs=tp.tensor([1.5]), validate_args=True)
    with pytest.raises(ValueError, match="not both"):
        Bernoulli()
    with pytest.raises(NotImplementedError, match="Normal and q Uniform"):
        kl_divergence(Normal(0.0, 1.0), Uniform(0.0, 1.0))
