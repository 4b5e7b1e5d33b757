"""``Categorical``: a distribution over ``K`` classes, by ``probs`` or ``logits``, as torch's."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

from tensorplay_jax.autograd import apply, call_op, no_grad
from tensorplay_jax.tensors import Tensor, next_key, tensor

__all__ = ["Categorical"]


# Each function below takes the parameter the user gave (probs or logits) and is one tape
# node, so gradients flow to it exactly as torch's formulas send them.


def _logits(param: jax.Array, is_logits: bool) -> jax.Array:
    """Normalised log-probabilities: ``logits - logsumexp``, or ``log`` of the clamped probs."""
    if is_logits:
        return param - jax.nn.logsumexp(param, axis=-1, keepdims=True)
    eps = jnp.finfo(param.dtype).eps
    return jnp.log(jnp.clip(_probs(param, False), eps, 1 - eps))


def _probs(param: jax.Array, is_logits: bool) -> jax.Array:
    """Probabilities: ``softmax(logits)``, or ``probs`` divided by their sum."""
    if is_logits:
        return jax.nn.softmax(param, axis=-1)
    return param / jnp.sum(param, axis=-1, keepdims=True)


def _log_prob(param: jax.Array, value: jax.Array, is_logits: bool) -> jax.Array:
    logits = _logits(param, is_logits)
    value = value.astype(jnp.int32)
    shape = jnp.broadcast_shapes((*value.shape, 1), logits.shape)
    logits = jnp.broadcast_to(logits, shape)
    index = jnp.broadcast_to(value[..., None], (*shape[:-1], 1))
    return jnp.take_along_axis(logits, index, axis=-1)[..., 0]


def _entropy(param: jax.Array, is_logits: bool) -> jax.Array:
    # torch clamps the logits to the dtype's smallest finite value, so 0 * log 0 is 0.
    logits = jnp.maximum(_logits(param, is_logits), jnp.finfo(param.dtype).min)
    return -jnp.sum(logits * _probs(param, is_logits), axis=-1)


def _sample(key: jax.Array, param: jax.Array, *, shape: tuple[int, ...], is_logits: bool) -> Any:
    return jax.random.categorical(key, _logits(param, is_logits), axis=-1, shape=shape)


class Categorical:
    """A categorical distribution over the last dimension of ``probs`` or ``logits``.

    ``probs`` need not sum to one (they are divided by their sum); ``logits``
    are unnormalised log-probabilities. Leading dimensions are the batch.

    Args:
        probs: non-negative weights, shape ``(..., K)``.
        logits: log-weights, shape ``(..., K)`` (give one of the two).
        validate_args: check ``probs`` / ``logits`` and ``log_prob``'s values.

    Raises:
        ValueError: neither or both of ``probs`` and ``logits``; a 0-d
            parameter; with ``validate_args``, negative or non-finite ``probs``,
            NaN ``logits``, or ``log_prob`` of a value outside ``0..K-1``.

    Example:
        >>> import tensorplay_jax as tp
        >>> from tensorplay_jax.distributions import Categorical
        >>> probs = tp.tensor([0.25, 0.75], requires_grad=True)
        >>> m = Categorical(probs)
        >>> loss = -m.log_prob(tp.tensor(1))
        >>> loss.backward()
        >>> probs.grad
        tensor([ 1.    , -0.3333])
        >>> int(m.sample((3,)).shape[0])
        3
    """

    def __init__(self, probs: Any = None, logits: Any = None, validate_args: bool | None = None):
        if (probs is None) == (logits is None):
            raise ValueError(
                "Categorical: either `probs` or `logits` must be specified, but not both"
            )
        param = probs if logits is None else logits
        self._param = param if isinstance(param, Tensor) else tensor(param)
        self._is_logits = logits is not None
        if self._param.ndim < 1:
            raise ValueError(
                f"Categorical: `{'logits' if self._is_logits else 'probs'}` needs at least one "
                f"dimension (the classes), got shape {tuple(self._param.shape)}"
            )
        self._validate = bool(validate_args)
        if self._validate:
            v = self._param.value
            bad = jnp.any(jnp.isnan(v)) if self._is_logits else ~jnp.all((v >= 0) & jnp.isfinite(v))
            if bool(bad):
                what = "logits contain NaN" if self._is_logits else "probs must be finite and >= 0"
                raise ValueError(f"Categorical: {what}")

    @property
    def num_events(self) -> int:
        """The number of classes ``K``."""
        return int(self._param.shape[-1])

    @property
    def batch_shape(self) -> tuple[int, ...]:
        """The parameter's shape without the class dimension."""
        return tuple(self._param.shape[:-1])

    @property
    def event_shape(self) -> tuple[int, ...]:
        """``()``: each sample is one class index."""
        return ()

    @functools.cached_property
    def logits(self) -> Tensor:
        """Normalised log-probabilities (``log_softmax`` of the logits, or log of the probs)."""
        return apply(_logits, self._param, self._is_logits)

    @functools.cached_property
    def probs(self) -> Tensor:
        """Probabilities summing to one along the last dimension."""
        return apply(_probs, self._param, self._is_logits)

    @property
    def mode(self) -> Tensor:
        """The most probable class of each batch entry."""
        return self.probs.argmax(dim=-1)

    def sample(self, sample_shape: Any = ()) -> Tensor:
        """Class indices of shape ``sample_shape + batch_shape`` (integers; no gradient).

        Draws from ``tp.manual_seed``'s state.
        """
        shape = (sample_shape,) if isinstance(sample_shape, int) else tuple(sample_shape)
        static = (("shape", shape + self.batch_shape), ("is_logits", self._is_logits))
        with no_grad():  # an unrecorded operation: it joins a pending forward of the probs
            return call_op(_sample, "Sample", (next_key(), self._param), static)

    def log_prob(self, value: Any) -> Tensor:
        """The log-probability of class index ``value`` (broadcast against the batch)."""
        if self._validate:
            v = value.value if isinstance(value, Tensor) else jnp.asarray(value)
            if bool(jnp.any((v < 0) | (v >= self.num_events))):
                raise ValueError(
                    f"Categorical.log_prob: values must be class indices in "
                    f"0..{self.num_events - 1}"
                )
        return apply(_log_prob, self._param, value, self._is_logits)

    def entropy(self) -> Tensor:
        """``-sum(p * log p)`` over the classes, per batch entry."""
        return apply(_entropy, self._param, self._is_logits)

    def __repr__(self) -> str:
        name = "logits" if self._is_logits else "probs"
        return f"Categorical({name}: {getattr(self, name).shape})"
