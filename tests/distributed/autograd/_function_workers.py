"""What ``test_custom_function.py`` runs on w1: custom ``autograd.Function`` s, and its oracle."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import tensorplay_jax as tp
from tensorplay_jax.autograd import Function
from tensorplay_jax.autograd.function import once_differentiable

RNG = np.random.default_rng(11)
X0 = RNG.standard_normal(4).astype(np.float32)
W0 = RNG.standard_normal(4).astype(np.float32)


class Cube(Function):
    """x ** 3 with its backward written out (3 x^2 g), from a saved input."""

    calls = 0

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x * x

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        Cube.calls += 1
        (x,) = ctx.saved_tensors
        return g * 3.0 * x * x


class FailingBackward(Function):
    """The identity whose backward raises (torch's SimulateBackwardError)."""

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        raise Exception("Simulate error on backward pass")


def times_w(t: tp.Tensor) -> tp.Tensor:
    """On w1: ``t * w`` (``w`` a constant), so the loss is ``sum(cube(x) * w)``."""
    return t * tp.tensor(W0)


def cube_times_w(t: tp.Tensor) -> tp.Tensor:
    """On w1: the custom Function on a Tensor that arrived over RPC, then ``* w``."""
    return Cube.apply(t) * tp.tensor(W0)


def fail_on_backward(t: tp.Tensor) -> tp.Tensor:
    return FailingBackward.apply(t + 1.0)


def backward_calls() -> int:
    return Cube.calls


def oracle() -> np.ndarray:
    """d/dx sum(x^3 * w) by ``jax.grad`` (no tape, no RPC)."""
    return np.asarray(jax.grad(lambda x: jnp.sum(x**3 * W0))(jnp.asarray(X0)))
