"""``nn.init`` against torch's rules: exact values for deterministic fills, statistics for draws.

Bounds and standard deviations are computed here from torch's documented formulas
(the oracle); with torch importable the same calls run on torch and must give
the same gains, fans and exact fills.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import tensorplay_jax as tp
from tensorplay_jax.nn import init

SHAPE = (64, 32, 3)  # fan_in = 96, fan_out = 192


def _torch_init():
    torch = pytest.importorskip("torch", reason="torch is not installed: live comparison skipped")
    return torch


GAINS = [
    ("linear", None, 1.0),
    ("conv2d", None, 1.0),
    ("sigmoid", None, 1.0),
    ("tanh", None, 5.0 / 3),
    ("relu", None, math.sqrt(2.0)),
    ("leaky_relu", None, math.sqrt(2.0 / (1 + 0.01**2))),
    ("leaky_relu", 0.2, math.sqrt(2.0 / (1 + 0.2**2))),
    ("selu", None, 0.75),
]


@pytest.mark.parametrize("name, param, expected", GAINS)
def test_calculate_gain(name, param, expected):
    assert init.calculate_gain(name, param) == pytest.approx(expected)


def test_calculate_gain_matches_torch_live():
    torch = _torch_init()
    for name, param, _ in GAINS:
        assert init.calculate_gain(name, param) == pytest.approx(
            torch.nn.init.calculate_gain(name, param)
        )


def _draw(fn, *args, **kwargs):
    tp.manual_seed(0)
    w = tp.zeros(*SHAPE, requires_grad=True)
    out = fn(w, *args, **kwargs)
    assert out is w and w.is_leaf and w.requires_grad
    return w.numpy()


@pytest.mark.parametrize(
    "fn, kwargs, bound",
    [
        (init.kaiming_uniform_, {}, math.sqrt(2.0 / 1.0001) * math.sqrt(3 / 96)),
        (init.kaiming_uniform_, {"mode": "fan_out", "nonlinearity": "relu"}, math.sqrt(6 / 192)),
        (init.xavier_uniform_, {"gain": 2.0}, 2.0 * math.sqrt(6 / (96 + 192))),
    ],
)
def test_uniform_family_bounds(fn, kwargs, bound):
    w = _draw(fn, **kwargs)
    assert np.abs(w).max() <= bound
    assert np.abs(w).max() > 0.95 * bound  # fills the interval
    assert np.std(w) == pytest.approx(bound / math.sqrt(3), rel=0.05)


@pytest.mark.parametrize(
    "fn, kwargs, std",
    [
        (init.kaiming_normal_, {}, math.sqrt(2.0 / 1.0001) / math.sqrt(96)),
        (init.kaiming_normal_, {"mode": "fan_out", "nonlinearity": "relu"}, math.sqrt(2 / 192)),
        (init.xavier_normal_, {}, math.sqrt(2 / (96 + 192))),
        (init.normal_, {"mean": 0.0, "std": 0.3}, 0.3),
    ],
)
def test_normal_family_std(fn, kwargs, std):
    w = _draw(fn, **kwargs)
    assert np.std(w) == pytest.approx(std, rel=0.05)
    assert abs(np.mean(w)) < 0.1 * std


def test_trunc_normal_stays_in_bounds():
    w = _draw(init.trunc_normal_, mean=1.0, std=2.0, a=0.0, b=2.0)
    assert w.min() >= 0.0 and w.max() <= 2.0 and abs(w.mean() - 1.0) < 0.05


def test_orthogonal_is_orthogonal_times_gain():
    tp.manual_seed(0)
    for shape in ((3, 5), (5, 3), (4, 2, 2)):
        w = init.orthogonal_(tp.zeros(*shape), gain=2.0).numpy().reshape(shape[0], -1)
        small = w @ w.T if shape[0] <= w.shape[1] else w.T @ w
        np.testing.assert_allclose(small, 4.0 * np.eye(small.shape[0]), atol=1e-5)


def _deterministic(lib_init, lib):
    out = []
    out += lib_init.constant_(lib.zeros(2, 3), 0.5).flatten().tolist()
    out += lib_init.ones_(lib.zeros(2)).tolist()
    out += lib_init.zeros_(lib.ones(2)).tolist()
    out += lib_init.eye_(lib.zeros(2, 3)).flatten().tolist()
    out += lib_init.dirac_(lib.zeros(2, 2, 3)).flatten().tolist()
    return out


def test_deterministic_fills_exact():
    expected = [0.5] * 6 + [1, 1] + [0, 0] + [1, 0, 0, 0, 1, 0]
    expected += [0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0]  # dirac_: w[0, 0, 1] = w[1, 1, 1] = 1
    assert _deterministic(init, tp) == expected


def test_deterministic_fills_match_torch_live():
    torch = _torch_init()
    assert _deterministic(init, tp) == _deterministic(torch.nn.init, torch)


def test_init_writes_through_a_view():
    w = tp.zeros(2, 3, requires_grad=True)
    with tp.no_grad():
        init.ones_(w[1])
    assert w.tolist() == [[0, 0, 0], [1, 1, 1]]


def test_fans_need_two_dimensions():
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        init.kaiming_normal_(tp.zeros(3))
    with pytest.raises(ValueError, match="Mode fan_avg not supported"):
        init.kaiming_normal_(tp.zeros(3, 3), mode="fan_avg")
