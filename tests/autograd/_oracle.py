"""Shared check: local gradients of a tensorplay_jax computation against ``jax.vjp``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import tensorplay_jax as tp
from tensorplay_jax.autograd import run_backward


def _as_tuple(x: Any) -> tuple[Any, ...]:
    return tuple(x) if isinstance(x, tuple | list) else (x,)


def check_vjp(
    tp_fn: Callable[..., Any],
    jax_fn: Callable[..., Any],
    arrays: Sequence[np.ndarray],
    *,
    seed: int = 0,
    rtol: float = 1e-5,
    atol: float = 1e-5,
) -> None:
    """Outputs and input gradients of ``tp_fn`` on Tensors equal ``jax.vjp(jax_fn)`` on arrays."""
    rng = np.random.default_rng(seed)
    tensors = [tp.tensor(a, requires_grad=True) for a in arrays]
    outs = _as_tuple(tp_fn(*tensors))
    expected_outs, pullback = jax.vjp(lambda *xs: _as_tuple(jax_fn(*xs)), *map(jnp.asarray, arrays))
    assert len(outs) == len(expected_outs)
    cots = []
    for o, e in zip(outs, expected_outs, strict=True):
        np.testing.assert_allclose(o.numpy(), np.asarray(e), rtol=rtol, atol=atol)
        if jnp.issubdtype(e.dtype, jnp.inexact):
            cots.append(jnp.asarray(rng.standard_normal(e.shape), e.dtype))
        else:
            cots.append(np.zeros(e.shape, jax.dtypes.float0))
    expected_grads = pullback(tuple(cots))
    roots = [(o, c) for o, c in zip(outs, cots, strict=True) if o.requires_grad]
    run_backward([r for r, _ in roots], [c for _, c in roots])
    for t, g in zip(tensors, expected_grads, strict=True):
        got = t.grad.numpy() if t.grad is not None else np.zeros(t.shape, t.dtype)
        np.testing.assert_allclose(got, np.asarray(g), rtol=rtol, atol=atol)
