"""The demo's data: scikit-learn's handwritten digits (shipped with the package, no download)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["Digits", "epoch_batches", "load"]


class Digits(NamedTuple):
    """8x8 digit images as 64 floats in [0, 1], and their labels 0-9."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def load(test_fraction: float = 0.2, seed: int = 0) -> Digits:
    """The 1797 digits, shuffled with ``seed`` and split into train and test.

    Raises:
      SystemExit: scikit-learn is not installed (with the install command).

    Example:
      >>> d = load()
      >>> d.x_train.shape, d.x_test.shape, int(d.y_train.max())
      ((1438, 64), (359, 64), 9)
    """
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise SystemExit(
            "the parameter-server demo needs scikit-learn (for its digits data set): "
            "pip install 'tensorplay-jax[demo]'"
        ) from None
    data = load_digits()
    x = (data.data / 16.0).astype(np.float32)
    y = data.target.astype(np.int32)
    order = np.random.default_rng(seed).permutation(len(x))
    n_test = round(len(x) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return Digits(x[train], y[train], x[test], y[test])


def epoch_batches(n: int, batch_size: int, epochs: int, seed: int = 0) -> list[np.ndarray]:
    """Index arrays of full batches, a fresh shuffle of ``range(n)`` per epoch (no partial batch).

    Example:
      >>> [b.shape for b in epoch_batches(10, 4, 2)]
      [(4,), (4,), (4,), (4,)]
    """
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(epochs):
        order = rng.permutation(n)
        out += [order[i : i + batch_size] for i in range(0, n - batch_size + 1, batch_size)]
    return out
