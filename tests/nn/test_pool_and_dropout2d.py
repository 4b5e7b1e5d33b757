"""``F.max_pool2d`` and ``nn.Dropout2d`` (added for the ported parameter-server tutorial)."""

from __future__ import annotations

import numpy as np

import tensorplay_jax as tp
from tensorplay_jax.nn import functional as F


def test_max_pool2d_values_and_gradient_against_numpy():
    a = np.random.default_rng(0).standard_normal((2, 3, 6, 4)).astype(np.float32)
    x = tp.tensor(a, requires_grad=True)
    y = F.max_pool2d(x, 2)
    windows = a.reshape(2, 3, 3, 2, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(2, 3, 3, 2, 4)
    np.testing.assert_allclose(y.numpy(), windows.max(-1))
    w = np.arange(1.0, 37.0, dtype=np.float32).reshape(2, 3, 3, 2)
    (y * tp.tensor(w)).sum().backward()
    want = np.zeros_like(a)  # each window's weight goes to its arg-max
    for n, c, i, j in np.ndindex(2, 3, 3, 2):
        k = windows[n, c, i, j].argmax()
        want[n, c, 2 * i + k // 2, 2 * j + k % 2] = w[n, c, i, j]
    np.testing.assert_allclose(x.grad.numpy(), want)


def test_dropout2d_zeros_whole_channels_and_scales_the_rest():
    tp.manual_seed(0)
    y = tp.nn.Dropout2d(0.5)(tp.ones(8, 16, 3, 3)).numpy()
    per_channel = y.reshape(8, 16, 9)
    assert np.all((per_channel == 0).all(-1) | (per_channel == 2).all(-1))
    assert 0 < (per_channel == 0).all(-1).mean() < 1
    assert np.array_equal(
        tp.nn.Dropout2d(0.5).eval()(tp.ones(2, 2, 1, 1)).numpy(), np.ones((2, 2, 1, 1))
    )


def test_max_pool2d_padding_pads_with_minus_infinity():
    a = -np.abs(np.random.default_rng(1).standard_normal((1, 2, 5, 5))).astype(np.float32)
    y = tp.nn.MaxPool2d(3, stride=2, padding=1)(tp.tensor(a)).numpy()
    padded = np.pad(a, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    want = np.array([[[[padded[0, c, 2 * i : 2 * i + 3, 2 * j : 2 * j + 3].max()
                        for j in range(3)] for i in range(3)] for c in range(2)]])  # fmt: skip
    np.testing.assert_allclose(y, want)
