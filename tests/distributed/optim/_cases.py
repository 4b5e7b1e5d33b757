"""The optax transforms every DistributedOptimizer parity test runs (name -> transform)."""

from __future__ import annotations

import optax

OPTIMIZERS = {
    "sgd": lambda: optax.sgd(0.1),
    "sgd_momentum": lambda: optax.sgd(0.1, momentum=0.9),
    "nesterov": lambda: optax.sgd(0.1, momentum=0.9, nesterov=True),
    "adam": lambda: optax.adam(0.01),
    "adamw": lambda: optax.adamw(0.01, weight_decay=0.1),
    "adagrad": lambda: optax.adagrad(0.1),
    "rmsprop": lambda: optax.rmsprop(0.01),
    "adamax": lambda: optax.adamax(0.01),
}


def local_steps(tx, params, grads_per_step):
    """Plain optax over the list of parameters: one update per gradient list."""
    state = tx.init(params)
    for grads in grads_per_step:
        updates, state = tx.update(grads, state, params)
        params = optax.apply_updates(params, updates)
    return params
