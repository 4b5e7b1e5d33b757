"""The one optax update loop the local and distributed optimizers share.

Each parameter keeps its own optax state, as tensorplay's optimizers keep
per-parameter state; a step updates each parameter from its gradient and state.

Example:
  >>> import jax.numpy as jnp, optax
  >>> tx = optax.sgd(0.5)
  >>> p = [jnp.ones(2)]
  >>> new_params, _ = update_each(tx, [jnp.ones(2)], [tx.init(p[0])], p)
  >>> new_params[0]
  Array([0.5, 0.5], dtype=float32)
"""

from __future__ import annotations

from typing import Any

import optax

__all__ = ["update_each"]


def update_each(
    tx: optax.GradientTransformation, grads: list, states: list, params: list
) -> tuple[list[Any], list[Any]]:
    """New values and optax states of ``params``, each from its gradient and its own state."""
    new_params, new_states = [], []
    for g, s, p in zip(grads, states, params, strict=True):
        updates, s = tx.update(g, s, p)
        new_params.append(optax.apply_updates(p, updates))
        new_states.append(s)
    return new_params, new_states
