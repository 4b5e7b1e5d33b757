"""The activation functions as pure JAX code, each with torch's values and gradients.

``nn.functional`` lifts each with ``tp.apply`` (one tape node); the modules of
``_activation`` call those. Where torch's derivative at a kink differs from what
``jax.grad`` of the plain formula gives, the formula is written so that it agrees
(stated beside it): ``hardtanh`` passes no gradient at its bounds, ``hardswish``
takes its outer pieces at -3 and 3, ``leaky_relu`` and ``elu`` take their negative
piece at 0. A branch that ``jnp.where`` does not select is evaluated on safe inputs,
so its gradient there is 0, never NaN.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import jax.scipy.special

from tensorplay_jax.nn import _jax_impl

_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _non_positive(x: jax.Array) -> jax.Array:
    """``x`` where ``x <= 0``, else 0: a safe input for a negative piece (gradient 1 at 0,
    where ``jnp.minimum(x, 0)`` would give half)."""
    return jnp.where(x > 0, jnp.zeros_like(x), x)


def leaky_relu(x: jax.Array, negative_slope: float) -> jax.Array:
    """``x`` where positive, ``negative_slope * x`` elsewhere (that slope at 0, as torch's)."""
    return jnp.where(x > 0, x, x * negative_slope)


def elu(x: jax.Array, alpha: float) -> jax.Array:
    """``x`` where positive, ``alpha * (exp(x) - 1)`` elsewhere."""
    return jnp.where(x > 0, x, alpha * jnp.expm1(_non_positive(x)))


def selu(x: jax.Array) -> jax.Array:
    """``scale * elu(x, alpha)`` with the self-normalising constants."""
    return _SELU_SCALE * elu(x, _SELU_ALPHA)


def celu(x: jax.Array, alpha: float) -> jax.Array:
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``."""
    return jnp.where(x > 0, x, alpha * jnp.expm1(_non_positive(x) / alpha))


def gelu(x: jax.Array, approximate: str) -> jax.Array:
    """``x * Phi(x)`` (``approximate="tanh"``: the tanh approximation)."""
    if approximate == "tanh":
        inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)
        return 0.5 * x * (1 + jnp.tanh(inner))
    return 0.5 * x * (1 + jax.scipy.special.erf(x / math.sqrt(2)))


def silu(x: jax.Array) -> jax.Array:
    """``x * sigmoid(x)``."""
    return x * jax.nn.sigmoid(x)


def softplus(x: jax.Array, beta: float, threshold: float) -> jax.Array:
    """``log(1 + exp(beta * x)) / beta``, and ``x`` itself where ``beta * x > threshold``."""
    return jnp.where(x * beta > threshold, x, jnp.logaddexp(0, x * beta) / beta)


def mish(x: jax.Array) -> jax.Array:
    """``x * tanh(softplus(x))``."""
    return x * jnp.tanh(jnp.logaddexp(0, x))


def softsign(x: jax.Array) -> jax.Array:
    """``x / (1 + |x|)``."""
    return x / (1 + _jax_impl.magnitude(x))


def hardtanh(x: jax.Array, min_val: float, max_val: float) -> jax.Array:
    """``x`` clipped to ``[min_val, max_val]``; the gradient is 0 at the bounds, as torch's."""
    inside = (x > min_val) & (x < max_val)
    return jnp.where(inside, x, jax.lax.stop_gradient(jnp.clip(x, min_val, max_val)))


def hardswish(x: jax.Array) -> jax.Array:
    """``x * relu6(x + 3) / 6``; at -3 the gradient is 0 and at 3 it is 1, as torch's."""
    middle = x * (x + 3) / 6
    # x * 0 below -3: -0.0 there, as torch's x * relu6(x + 3) / 6 gives
    return jnp.where(x <= -3, x * 0.0, jnp.where(x < 3, middle, x))


def hardsigmoid(x: jax.Array) -> jax.Array:
    """``relu6(x + 3) / 6``; no gradient at -3 and 3, as torch's."""
    inside = (x > -3) & (x < 3)
    return jnp.where(inside, x / 6 + 0.5, jax.lax.stop_gradient(jnp.where(x <= -3, 0.0, 1.0)))


def logsigmoid(x: jax.Array) -> jax.Array:
    """``log(sigmoid(x))``, computed stably."""
    return jax.nn.log_sigmoid(x)


def softmin(x: jax.Array, dim: int) -> jax.Array:
    """``softmax(-x)`` along ``dim``."""
    return jax.nn.softmax(-x, axis=dim)


def glu(x: jax.Array, dim: int) -> jax.Array:
    """``a * sigmoid(b)`` for the halves ``a``, ``b`` of ``x`` along ``dim``."""
    a, b = jnp.split(x, 2, axis=dim)
    return a * jax.nn.sigmoid(b)


def threshold(x: jax.Array, threshold: float, value: float) -> jax.Array:
    """``x`` where ``x > threshold``, ``value`` elsewhere."""
    return jnp.where(x > threshold, x, jnp.asarray(value, x.dtype))
