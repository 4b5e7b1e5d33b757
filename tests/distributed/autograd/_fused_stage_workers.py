"""What ``test_fused_stage.py`` runs on its stage worker (w1), and the hand-written oracle."""

from __future__ import annotations

import numpy as np

import tensorplay_jax as tp
import tensorplay_jax.distributed.autograd as dist_autograd
from tensorplay_jax.autograd import trace_counts

RNG = np.random.default_rng(11)
X0 = RNG.standard_normal((4, 6)).astype(np.float32)
W0 = (0.3 * RNG.standard_normal((6, 9))).astype(np.float32)
C0 = RNG.standard_normal((4, 9)).astype(np.float32)

_weight: list[tp.Tensor] = []


def reset() -> None:
    _weight[:] = [tp.tensor(W0, requires_grad=True)]


def stage(x: tp.Tensor) -> tp.Tensor:
    """On w1: 2 tanh(x @ w), from an ``x`` that arrived recorded (its recv node ends w1's pass)."""
    return (x @ _weight[0]).tanh() * 2.0


def counts() -> tuple[int, int]:
    """Fused backward programs traced, and pullbacks traced one by one, on this worker."""
    c = trace_counts()
    return c.get("<fused backward>", 0), c.get("<backward>", 0)


def weight_grad(context_id: int) -> np.ndarray:
    return np.asarray(dist_autograd.get_gradients(context_id)[_weight[0]])


def oracle() -> tuple[np.ndarray, np.ndarray]:
    """d/dx and d/dw of sum(C0 * 2 tanh(x w)), by hand."""
    g = 2.0 * C0 * (1.0 - np.tanh(X0 @ W0) ** 2)
    return g @ W0.T, X0.T @ g
