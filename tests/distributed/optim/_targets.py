"""Functions the DistributedOptimizer tests run on the workers (importable there)."""

from __future__ import annotations

import optax


def failing_transform() -> optax.GradientTransformation:
    """A transform whose update raises on the owner."""

    def init(params):
        return optax.EmptyState()

    def update(updates, state, params=None):
        raise ValueError("update exploded")

    return optax.GradientTransformation(init, update)


def train_one(rm, opt, x):
    """Run on another worker: one differentiable step with a RemoteModule and an optimizer."""
    from tensorplay_jax.distributed import autograd as dist_autograd

    with dist_autograd.context() as ctx:
        dist_autograd.backward(ctx, [rm(x).sum()])
        opt.step(ctx)
    return True
