"""``tensorplay_jax.distributions``: probability distributions on the tape, torch's API.

``Categorical`` and ``Bernoulli`` (``probs`` or ``logits``), ``Normal`` and ``Uniform``
(``rsample`` differentiable in the parameters), each with ``sample``, ``log_prob``,
``entropy`` and torch's moments, and ``kl_divergence`` (``kl``) between two of one
kind. ``log_prob``, ``entropy`` and ``rsample`` are tape operations, so a
policy-gradient or variational loss built from them backpropagates into the network
that made the parameters; samples draw from ``tp.manual_seed``'s state.
"""

from tensorplay_jax.distributions import kl as kl
from tensorplay_jax.distributions._bernoulli import Bernoulli as Bernoulli
from tensorplay_jax.distributions._categorical import Categorical as Categorical
from tensorplay_jax.distributions._normal import Normal as Normal
from tensorplay_jax.distributions._uniform import Uniform as Uniform
from tensorplay_jax.distributions.kl import kl_divergence as kl_divergence
from tensorplay_jax.distributions.kl import register_kl as register_kl

__all__ = [
    "Bernoulli",
    "Categorical",
    "Normal",
    "Uniform",
    "kl",
    "kl_divergence",
    "register_kl",
]
