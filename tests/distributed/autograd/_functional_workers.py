"""Remote functions of the functional-mode tests (``differentiable_rpc``), run on w1."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from tensorplay_jax.distributed import rpc
from tensorplay_jax.distributed.autograd import _remote_vjp


# --------------------------------------------------------------------- remote functions
def f(w, x):
    """The issue's plain JAX function."""
    return jnp.sum((x @ w) ** 2)


def stage(w, h, *, scale):
    """A model stage with a pytree result and a static keyword."""
    y = jnp.tanh(h @ w) * scale
    return {"y": y, "norm": jnp.sum(y * y)}


def only_on_w1(x):
    """Works on w1 only (so the caller cannot evaluate its shape)."""
    if rpc.get_worker_info().name != "w1":
        raise RuntimeError("only_on_w1 runs on w1")
    return x * 2.0


def stats():
    return _remote_vjp.stats()


def param_value(rref):
    return np.asarray(rref.local_value().value)


def data(seed, *shape):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def close(a, b, rtol=1e-5, atol=1e-6):
    jax.tree_util.tree_map(
        lambda u, v: np.testing.assert_allclose(u, v, rtol=rtol, atol=atol), a, b
    )
