"""``tensorplay_jax.distributions``: probability distributions on the tape, torch's API.

``Categorical`` (``probs`` or ``logits``; ``sample``, ``log_prob``,
``entropy``): its ``log_prob`` and ``entropy`` are tape operations, so a
policy-gradient loss built from them backpropagates into the network that made
the ``probs``; samples draw from ``tp.manual_seed``'s state.
"""

from tensorplay_jax.distributions._categorical import Categorical as Categorical

__all__ = ["Categorical"]
