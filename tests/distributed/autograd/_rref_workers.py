"""What ``test_rref_backward.py`` runs on the owner (w1), and its ``jax.grad`` oracle."""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

import tensorplay_jax as tp
import tensorplay_jax.distributed.autograd as dist_autograd
from tests._worker import npa

RNG = np.random.default_rng(7)
X0 = RNG.standard_normal(5).astype(np.float32)
P0 = RNG.standard_normal(5).astype(np.float32)

# The parameter the owner (w1) holds: a leaf of its own tape.
_param: list[tp.Tensor] = []


def reset_param() -> None:
    _param[:] = [tp.tensor(P0, requires_grad=True)]


def loss_with_param(x: tp.Tensor) -> tp.Tensor:
    """On w1: sum(tanh(x * p) ** 2), from an ``x`` that arrived (recorded) or a plain one."""
    return (tp.tanh(x * _param[0]) ** 2).sum()


def times_param(x: tp.Tensor) -> tp.Tensor:
    return x * _param[0]


def param_grad_in(context_id: int) -> np.ndarray:
    return np.asarray(dist_autograd.get_gradients(context_id)[_param[0]])


def param_dot_grad() -> np.ndarray | None:
    g = _param[0].grad
    return None if g is None else npa(g)


def vector() -> tp.Tensor:
    return tp.ones(3, requires_grad=True) * 2.0


def slow_loss(delay: float) -> tp.Tensor:
    time.sleep(delay)
    return (tp.ones(2, requires_grad=True) * 2.0).sum()


def oracle() -> tuple[np.ndarray, np.ndarray]:
    """d/dx and d/dp of sum(tanh(x * p) ** 2), by jax.grad (no tape, no RPC)."""
    f = lambda x, p: jnp.sum(jnp.tanh(x * p) ** 2)
    gx, gp = jax.grad(f, argnums=(0, 1))(jnp.asarray(X0), jnp.asarray(P0))
    return np.asarray(gx), np.asarray(gp)
