"""``Uniform``: the uniform distribution on ``[low, high)``, as torch's."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from tensorplay_jax.autograd import apply, no_grad
from tensorplay_jax.distributions._shapes import as_tensor_param
from tensorplay_jax.distributions._shapes import sample_shape as as_shape
from tensorplay_jax.tensors import Tensor, next_key

__all__ = ["Uniform"]


def _draw(low: jax.Array, high: jax.Array, key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    low, high = jnp.broadcast_arrays(low, high)
    u = jax.random.uniform(key, shape + low.shape, low.dtype)
    return low + u * (high - low)


def _log_prob(low: jax.Array, high: jax.Array, value: jax.Array) -> jax.Array:
    inside = (low <= value) & (high > value)
    return jnp.log(inside.astype(value.dtype)) - jnp.log(high - low)


def _entropy(low: jax.Array, high: jax.Array) -> jax.Array:
    return jnp.log(high - low)


def _cdf(low: jax.Array, high: jax.Array, value: jax.Array) -> jax.Array:
    return jnp.clip((value - low) / (high - low), 0, 1)


def _mean(low: jax.Array, high: jax.Array) -> jax.Array:
    return (high + low) / 2


def _variance(low: jax.Array, high: jax.Array) -> jax.Array:
    return (high - low) ** 2 / 12


class Uniform:
    """The uniform distribution on ``[low, high)`` (they broadcast to the batch shape);
    ``rsample`` is differentiable in both bounds.

    Raises:
        ValueError: with ``validate_args``, ``low`` not below ``high``.

    Example:
        >>> import tensorplay_jax as tp
        >>> from tensorplay_jax.distributions import Uniform
        >>> m = Uniform(tp.tensor(0.0), tp.tensor(4.0))
        >>> round(m.log_prob(tp.tensor(1.0)).item(), 4), m.log_prob(tp.tensor(5.0)).item()
        (-1.3863, -inf)
    """

    def __init__(self, low: Any, high: Any, validate_args: bool | None = None) -> None:
        self.low, self.high = as_tensor_param(low), as_tensor_param(high)
        if validate_args and not bool(jnp.all(self.low.value < self.high.value)):
            raise ValueError("Uniform: expected low < high")

    @property
    def batch_shape(self) -> tuple[int, ...]:
        """The broadcast shape of ``low`` and ``high``."""
        return tuple(jnp.broadcast_shapes(self.low.shape, self.high.shape))

    @property
    def event_shape(self) -> tuple[int, ...]:
        """``()``."""
        return ()

    @property
    def mean(self) -> Tensor:
        """``(low + high) / 2``."""
        return apply(_mean, self.low, self.high)

    @property
    def variance(self) -> Tensor:
        """``(high - low) ** 2 / 12``."""
        return apply(_variance, self.low, self.high)

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        """Samples of shape ``sample_shape + batch_shape``, differentiable in the bounds."""
        return apply(_draw, self.low, self.high, next_key(), as_shape(sample_shape))

    def sample(self, sample_shape: Any = ()) -> Tensor:
        """Samples (no gradient)."""
        with no_grad():
            return self.rsample(sample_shape)

    def log_prob(self, value: Any) -> Tensor:
        """``-log(high - low)`` inside the interval, ``-inf`` outside."""
        return apply(_log_prob, self.low, self.high, value)

    def entropy(self) -> Tensor:
        """``log(high - low)``."""
        return apply(_entropy, self.low, self.high)

    def cdf(self, value: Any) -> Tensor:
        """``P(X <= value)``."""
        return apply(_cdf, self.low, self.high, value)

    def __repr__(self) -> str:
        return f"Uniform(low: {self.low.shape}, high: {self.high.shape})"
