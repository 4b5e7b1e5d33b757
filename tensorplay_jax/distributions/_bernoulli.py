"""``Bernoulli``: a coin by ``probs`` or ``logits``, as torch's."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from tensorplay_jax.autograd import apply, no_grad
from tensorplay_jax.distributions._shapes import as_tensor_param
from tensorplay_jax.distributions._shapes import sample_shape as as_shape
from tensorplay_jax.tensors import Tensor, next_key

__all__ = ["Bernoulli"]


def _logits(param: jax.Array, is_logits: bool) -> jax.Array:
    """The log-odds; probabilities are clamped to ``[eps, 1 - eps]`` first, as torch's."""
    if is_logits:
        return param
    eps = jnp.finfo(param.dtype).eps
    p = jnp.clip(param, eps, 1 - eps)
    return jnp.log(p) - jnp.log1p(-p)


def _probs(param: jax.Array, is_logits: bool) -> jax.Array:
    return jax.nn.sigmoid(param) if is_logits else param


def _bce_with_logits(logits: jax.Array, target: jax.Array) -> jax.Array:
    return jnp.maximum(logits, 0) - logits * target + jnp.log1p(jnp.exp(-jnp.abs(logits)))


def _log_prob(param: jax.Array, value: jax.Array, is_logits: bool) -> jax.Array:
    logits, value = jnp.broadcast_arrays(_logits(param, is_logits), value.astype(param.dtype))
    return -_bce_with_logits(logits, value)


def _entropy(param: jax.Array, is_logits: bool) -> jax.Array:
    return _bce_with_logits(_logits(param, is_logits), _probs(param, is_logits))


def _draw(param: jax.Array, key: jax.Array, shape: tuple[int, ...], is_logits: bool) -> jax.Array:
    p = _probs(param, is_logits)
    return jax.random.bernoulli(key, p, shape + p.shape).astype(param.dtype)


class Bernoulli:
    """1 with probability ``probs`` (or ``sigmoid(logits)``), else 0; samples are floats, as
    torch's.

    Raises:
        ValueError: neither or both of ``probs`` and ``logits``; with ``validate_args``,
            ``probs`` outside [0, 1].

    Example:
        >>> import tensorplay_jax as tp
        >>> from tensorplay_jax.distributions import Bernoulli
        >>> m = Bernoulli(probs=tp.tensor([0.25, 0.5]))
        >>> [round(v, 4) for v in m.log_prob(tp.tensor([1.0, 0.0])).tolist()]
        [-1.3863, -0.6931]
    """

    def __init__(self, probs: Any = None, logits: Any = None, validate_args: bool | None = None):
        if (probs is None) == (logits is None):
            raise ValueError("Either `probs` or `logits` must be specified, but not both.")
        self._is_logits = logits is not None
        self._param = as_tensor_param(logits if self._is_logits else probs)
        if validate_args and not self._is_logits:
            v = self._param.value
            if not bool(jnp.all((v >= 0) & (v <= 1))):
                raise ValueError(
                    "Expected parameter probs of Bernoulli to satisfy the constraint "
                    "Interval(lower_bound=0.0, upper_bound=1.0), but found invalid values"
                )

    @property
    def batch_shape(self) -> tuple[int, ...]:
        """The parameter's shape."""
        return tuple(self._param.shape)

    @property
    def event_shape(self) -> tuple[int, ...]:
        """``()``."""
        return ()

    @property
    def probs(self) -> Tensor:
        """The probability of 1."""
        return apply(_probs, self._param, self._is_logits)

    @property
    def logits(self) -> Tensor:
        """The log-odds of 1."""
        return apply(_logits, self._param, self._is_logits)

    @property
    def mean(self) -> Tensor:
        """``probs``."""
        return self.probs

    @property
    def variance(self) -> Tensor:
        """``probs * (1 - probs)``."""
        p = self.probs
        return p * (1 - p)

    def sample(self, sample_shape: Any = ()) -> Tensor:
        """0/1 floats of shape ``sample_shape + batch_shape`` (no gradient)."""
        with no_grad():
            return apply(_draw, self._param, next_key(), as_shape(sample_shape), self._is_logits)

    def log_prob(self, value: Any) -> Tensor:
        """``value * log p + (1 - value) * log(1 - p)``, computed from the logits."""
        return apply(_log_prob, self._param, value, self._is_logits)

    def entropy(self) -> Tensor:
        """``-(p log p + (1 - p) log(1 - p))``."""
        return apply(_entropy, self._param, self._is_logits)

    def __repr__(self) -> str:
        name = "logits" if self._is_logits else "probs"
        return f"Bernoulli({name}: {self._param.shape})"
