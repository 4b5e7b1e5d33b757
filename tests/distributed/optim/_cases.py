"""The optax transforms every DistributedOptimizer parity test runs (name -> transform)."""

from __future__ import annotations

import itertools

import numpy as np
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


def local_trajectory(tx, params, grads_per_step):
    """Plain optax over the list of parameters: the parameters before the first update and
    after each one (one update per gradient list)."""
    state = tx.init(params)
    out = [params]
    for grads in grads_per_step:
        updates, state = tx.update(grads, state, params)
        params = optax.apply_updates(params, updates)
        out.append(params)
    return out


def local_steps(tx, params, grads_per_step):
    """Plain optax over the list of parameters: the parameters after every update."""
    return local_trajectory(tx, params, grads_per_step)[-1]


def float32_bound(trajectory, i, ulps=16):
    """Per element of parameter ``i``, how far two float32 runs of the same updates may
    differ by rounding alone: ``ulps`` float32 epsilons of the magnitudes the steps add
    (the start, then each update), whatever order or fusion each run's arithmetic took."""
    steps = [np.asarray(p[i], np.float64) for p in trajectory]
    scale = np.abs(steps[0]) + sum(np.abs(b - a) for a, b in itertools.pairwise(steps))
    return ulps * np.finfo(np.float32).eps * scale
