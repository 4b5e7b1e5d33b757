"""Distributions written once for torch and for tensorplay_jax: torch is the oracle
(``tests/_torch_golden.py``). ``golden/make_golden.py`` stores torch's answers in
``golden/torch_distributions.npz``; ``test_torch_parity.py`` runs the cases here."""

from __future__ import annotations

import numpy as np

from tests._torch_golden import Case

_R = np.random.default_rng(11)


def _n(*shape: int) -> np.ndarray:
    return _R.standard_normal(shape).astype(np.float32)


def _pos(*shape: int) -> np.ndarray:
    return (np.abs(_R.standard_normal(shape)) + 0.3).astype(np.float32)


def _p(*shape: int) -> np.ndarray:
    return _R.uniform(0.05, 0.95, shape).astype(np.float32)


_Q = np.array([0.1, 0.5, 0.9, 0.3], np.float32)
_D = "distributions"


def _normal(m, loc, scale):
    return m.distributions.Normal(loc, scale)


CASES: dict[str, Case] = {
    "normal": Case(
        lambda m, loc, scale, x: (
            _normal(m, loc, scale).log_prob(x),
            _normal(m, loc, scale).entropy(),
            _normal(m, loc, scale).cdf(x),
            _normal(m, loc, scale).icdf(m.tensor(_Q)),
            _normal(m, loc, scale).mean,
            _normal(m, loc, scale).stddev,
            _normal(m, loc, scale).variance,
        ),
        (_n(4), _pos(4), _n(4)),
    ),
    "normal_broadcast": Case(
        lambda m, loc, scale, x: _normal(m, loc, scale).log_prob(x), (_n(3, 1), _pos(1, 4), _n(4))
    ),
    "bernoulli_probs": Case(
        lambda m, p, v: (
            m.distributions.Bernoulli(probs=p).log_prob(v),
            m.distributions.Bernoulli(probs=p).entropy(),
            m.distributions.Bernoulli(probs=p).variance,
            m.distributions.Bernoulli(probs=p).logits,
        ),
        (_p(5), np.array([1.0, 0.0, 1.0, 1.0, 0.0], np.float32)),
    ),
    "bernoulli_logits": Case(
        lambda m, lg, v: (
            m.distributions.Bernoulli(logits=lg).log_prob(v),
            m.distributions.Bernoulli(logits=lg).entropy(),
            m.distributions.Bernoulli(logits=lg).probs,
        ),
        (_n(5) * 3, np.array([1.0, 0.0, 1.0, 1.0, 0.0], np.float32)),
    ),
    "uniform": Case(
        lambda m, lo, width, x: (
            m.distributions.Uniform(lo, lo + width).log_prob(x),
            m.distributions.Uniform(lo, lo + width).entropy(),
            m.distributions.Uniform(lo, lo + width).cdf(x),
            m.distributions.Uniform(lo, lo + width).mean,
            m.distributions.Uniform(lo, lo + width).variance,
        ),
        (
            np.array([0.0, -1.0, 2.0], np.float32),
            np.array([1.0, 3.0, 0.5], np.float32),
            np.array([0.5, 1.5, 2.25], np.float32),
        ),
    ),
    "uniform_outside_unvalidated": Case(  # torch validates by default: it would raise
        lambda m, lo, hi, x: m.distributions.Uniform(lo, hi, validate_args=False).log_prob(x),
        (
            np.array([0.0, 0.0], np.float32),
            np.array([1.0, 1.0], np.float32),
            np.array([2.0, -1.0], np.float32),
        ),
        differentiable=False,
    ),
    "categorical": Case(
        lambda m, logits: (
            m.distributions.Categorical(logits=logits).log_prob(m.tensor([2, 0, 1])),
            m.distributions.Categorical(logits=logits).entropy(),
        ),
        (_n(3, 4),),
    ),
    "kl_normal": Case(
        lambda m, a, b, c, d: m.distributions.kl_divergence(_normal(m, a, b), _normal(m, c, d)),
        (_n(4), _pos(4), _n(4), _pos(4)),
    ),
    "kl_categorical": Case(
        lambda m, p, q: m.distributions.kl_divergence(
            m.distributions.Categorical(probs=p), m.distributions.Categorical(probs=q)
        ),
        (_p(3, 4), _p(3, 4)),
    ),
    "kl_categorical_zeros": Case(
        lambda m, p, q: m.distributions.kl_divergence(
            m.distributions.Categorical(probs=p), m.distributions.Categorical(probs=q)
        ),
        (
            np.array([[0.0, 0.5, 0.5], [0.2, 0.3, 0.5]], np.float32),
            np.array([[0.3, 0.3, 0.4], [0.0, 0.5, 0.5]], np.float32),
        ),
        differentiable=False,
    ),
    "kl_bernoulli_probs_at_the_edges": Case(
        lambda m, p, q: m.distributions.kl_divergence(
            m.distributions.Bernoulli(probs=p), m.distributions.Bernoulli(probs=q)
        ),
        (np.array([0.0, 1.0, 0.3, 0.3], np.float32), np.array([0.5, 0.5, 0.0, 1.0], np.float32)),
        differentiable=False,
    ),
    "kl_bernoulli": Case(
        lambda m, p, q: m.distributions.kl_divergence(
            m.distributions.Bernoulli(logits=p), m.distributions.Bernoulli(logits=q)
        ),
        (_n(5), _n(5)),
    ),
}
