"""``Normal``: the Gaussian by ``loc`` and ``scale``, with reparameterised samples, as torch's."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

from tensorplay_jax.autograd import apply, no_grad
from tensorplay_jax.distributions._shapes import as_tensor_param
from tensorplay_jax.distributions._shapes import sample_shape as as_shape
from tensorplay_jax.tensors import Tensor, next_key

__all__ = ["Normal"]

_LOG_SQRT_2PI = math.log(math.sqrt(2 * math.pi))


def _broadcast(loc: jax.Array, scale: jax.Array) -> tuple[jax.Array, jax.Array]:
    return tuple(jnp.broadcast_arrays(loc, scale))  # type: ignore[return-value]


def _loc_of(loc: jax.Array, scale: jax.Array) -> jax.Array:
    return _broadcast(loc, scale)[0]


def _scale_of(loc: jax.Array, scale: jax.Array) -> jax.Array:
    return _broadcast(loc, scale)[1]


def _draw(loc: jax.Array, scale: jax.Array, key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    loc, scale = _broadcast(loc, scale)
    eps = jax.random.normal(key, shape + loc.shape, loc.dtype)
    return loc + scale * eps


def _log_prob(loc: jax.Array, scale: jax.Array, value: jax.Array) -> jax.Array:
    return -((value - loc) ** 2) / (2 * scale**2) - jnp.log(scale) - _LOG_SQRT_2PI


def _entropy(loc: jax.Array, scale: jax.Array) -> jax.Array:
    return jnp.broadcast_to(
        0.5 + _LOG_SQRT_2PI + jnp.log(scale), jnp.broadcast_shapes(loc.shape, scale.shape)
    )


def _cdf(loc: jax.Array, scale: jax.Array, value: jax.Array) -> jax.Array:
    return 0.5 * (1 + jax.scipy.special.erf((value - loc) / (scale * math.sqrt(2))))


def _icdf(loc: jax.Array, scale: jax.Array, value: jax.Array) -> jax.Array:
    return loc + scale * jax.scipy.special.erfinv(2 * value - 1) * math.sqrt(2)


class Normal:
    """The normal distribution with mean ``loc`` and standard deviation ``scale`` (they
    broadcast to the batch shape).

    ``rsample`` is differentiable (``loc + scale * eps``, ``eps`` standard normal from
    ``tp.manual_seed``'s state); ``sample`` is not.

    Raises:
        ValueError: with ``validate_args``, a ``scale`` that is not positive.

    Example:
        >>> import tensorplay_jax as tp
        >>> from tensorplay_jax.distributions import Normal
        >>> m = Normal(tp.tensor(0.0), tp.tensor(2.0))
        >>> round(m.log_prob(tp.tensor(0.0)).item(), 4), round(m.entropy().item(), 4)
        (-1.6121, 2.1121)
    """

    def __init__(self, loc: Any, scale: Any, validate_args: bool | None = None) -> None:
        self.loc, self.scale = as_tensor_param(loc), as_tensor_param(scale)
        if validate_args and not bool(jnp.all(self.scale.value > 0)):
            raise ValueError(
                "Expected parameter scale of Normal to satisfy the constraint "
                "GreaterThan(lower_bound=0.0), but found invalid values"
            )

    @property
    def batch_shape(self) -> tuple[int, ...]:
        """The broadcast shape of ``loc`` and ``scale``."""
        return tuple(jnp.broadcast_shapes(self.loc.shape, self.scale.shape))

    @property
    def event_shape(self) -> tuple[int, ...]:
        """``()``: each sample is one number."""
        return ()

    @property
    def mean(self) -> Tensor:
        """``loc`` (broadcast)."""
        return apply(_loc_of, self.loc, self.scale)

    mode = mean

    @property
    def stddev(self) -> Tensor:
        """``scale`` (broadcast)."""
        return apply(_scale_of, self.loc, self.scale)

    @property
    def variance(self) -> Tensor:
        """``scale ** 2``."""
        return self.stddev.pow(2)

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        """Samples of shape ``sample_shape + batch_shape``, differentiable in ``loc`` and
        ``scale``."""
        return apply(_draw, self.loc, self.scale, next_key(), as_shape(sample_shape))

    def sample(self, sample_shape: Any = ()) -> Tensor:
        """Samples of shape ``sample_shape + batch_shape`` (no gradient)."""
        with no_grad():
            return self.rsample(sample_shape)

    def log_prob(self, value: Any) -> Tensor:
        """The log-density at ``value``."""
        return apply(_log_prob, self.loc, self.scale, value)

    def entropy(self) -> Tensor:
        """``0.5 + log(sqrt(2 pi) * scale)``."""
        return apply(_entropy, self.loc, self.scale)

    def cdf(self, value: Any) -> Tensor:
        """``P(X <= value)``."""
        return apply(_cdf, self.loc, self.scale, value)

    def icdf(self, value: Any) -> Tensor:
        """The value whose ``cdf`` is ``value``."""
        return apply(_icdf, self.loc, self.scale, value)

    def __repr__(self) -> str:
        return f"Normal(loc: {self.loc.shape}, scale: {self.scale.shape})"
