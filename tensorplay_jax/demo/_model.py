"""The demo's model and the single-process reference training it is checked against."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import optax

import tensorplay_jax as tp
from tensorplay_jax.nn import functional as F

__all__ = ["DigitsNet", "train_locally"]


class DigitsNet(tp.nn.Module):
    """A two-layer perceptron for 8x8 digits: 64 -> hidden -> 10 logits.

    Example:
      >>> tp.manual_seed(0)
      >>> DigitsNet(hidden=32)(tp.zeros(5, 64)).shape
      (5, 10)
    """

    def __init__(self, hidden: int = 64) -> None:
        super().__init__()
        self.fc1 = tp.nn.Linear(64, hidden)
        self.fc2 = tp.nn.Linear(hidden, 10)

    def forward(self, x: tp.Tensor) -> tp.Tensor:
        return self.fc2(self.fc1(x).relu())


def train_locally(
    initial: dict[str, np.ndarray],
    tx: optax.GradientTransformation,
    x: np.ndarray,
    y: np.ndarray,
    batches: Sequence[np.ndarray],
    hidden: int,
) -> dict[str, np.ndarray]:
    """Single-process training: the same start, the same batches in the same order, plain optax.

    Returns:
      The final parameters by name.
    """
    model = DigitsNet(hidden)
    model.load_state_dict(initial)
    params = list(model.parameters())
    state = tx.init([p.value for p in params])
    for idx in batches:
        loss = F.cross_entropy(model(tp.tensor(x[idx])), tp.tensor(y[idx]))
        loss.backward()
        values = [p.value for p in params]
        updates, state = tx.update([p.grad.value for p in params], state, values)
        for p, v in zip(params, optax.apply_updates(values, updates), strict=True):
            p.data = v
        model.zero_grad()
    return {k: np.asarray(v.value) for k, v in model.state_dict().items()}
