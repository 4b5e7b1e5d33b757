"""Gradient clipping, torch's ``clip_grad_norm_`` and ``clip_grad_value_``: the gradients
are rescaled (or clamped) in place, as an optimiser's step writes parameters (nothing
recorded; views and references to ``p.grad`` see the new values). The norms and the
rescaling of all gradients run as one compiled program per set of shapes."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

import jax
import jax.numpy as jnp

from tensorplay_jax.tensors import Tensor, overwrite, tensor

__all__ = ["clip_grad_norm_", "clip_grad_value_", "get_total_norm"]


def _grads(parameters: Any) -> list[Tensor]:
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    grads = [p.grad for p in params if p.grad is not None]
    for g in grads:
        if g.is_sparse:
            raise NotImplementedError("gradient clipping of sparse gradients: call to_dense()")
    return grads


def _norm(values: tuple[jax.Array, ...], norm_type: float) -> jax.Array:
    if norm_type == float("inf"):
        return jnp.max(jnp.stack([jnp.max(jnp.abs(v)) for v in values]))
    norms = jnp.stack([jnp.sum(jnp.abs(v) ** norm_type) ** (1 / norm_type) for v in values])
    return jnp.sum(norms**norm_type) ** (1 / norm_type)


@functools.partial(jax.jit, static_argnums=(1,))
def _total_norm(values: tuple[jax.Array, ...], norm_type: float) -> jax.Array:
    return _norm(values, norm_type)


@functools.partial(jax.jit, static_argnums=(2,))
def _clipped(
    values: tuple[jax.Array, ...], max_norm: jax.Array, norm_type: float
) -> tuple[jax.Array, tuple[jax.Array, ...]]:
    total = _norm(values, norm_type)
    coef = jnp.minimum(max_norm / (total + 1e-6), 1.0)  # torch's clip_coef_clamped
    return total, tuple((v * coef.astype(v.dtype)) for v in values)


def get_total_norm(
    tensors: Iterable[Tensor] | Tensor,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach: bool | None = None,
) -> Tensor:
    """The ``norm_type``-norm of the norms of ``tensors`` (their norm taken as one vector)."""
    ts = [tensors] if isinstance(tensors, Tensor) else list(tensors)
    if not ts:
        return tensor(0.0)
    total = _total_norm(tuple(t.value for t in ts), float(norm_type))
    _check_finite(total, norm_type, error_if_nonfinite)
    return Tensor(total)


def clip_grad_norm_(
    parameters: Iterable[Tensor] | Tensor,
    max_norm: float,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach: bool | None = None,
) -> Tensor:
    """Rescale the parameters' gradients in place so that their joint ``norm_type``-norm is
    at most ``max_norm`` (each times ``min(max_norm / (norm + 1e-6), 1)``); returns the norm
    before clipping.

    Raises:
        RuntimeError: ``error_if_nonfinite`` and the norm is NaN or infinite.
    """
    grads = _grads(parameters)
    if not grads:
        return tensor(0.0)
    max_norm_value = jnp.asarray(float(max_norm), jnp.float32)
    total, clipped = _clipped(tuple(g.value for g in grads), max_norm_value, float(norm_type))
    _check_finite(total, norm_type, error_if_nonfinite)
    for g, new in zip(grads, clipped, strict=True):
        overwrite(g, new)
    return Tensor(total)


def _check_finite(total: jax.Array, norm_type: float, error_if_nonfinite: bool) -> None:
    if error_if_nonfinite and not bool(jnp.isfinite(total)):
        raise RuntimeError(
            f"The total norm of order {float(norm_type)} for gradients from `parameters` is "
            "non-finite, so it cannot be clipped. To disable this error and scale the "
            "gradients by the non-finite norm anyway, set `error_if_nonfinite=False`"
        )


@jax.jit
def _clamped(values: tuple[jax.Array, ...], limit: jax.Array) -> tuple[jax.Array, ...]:
    return tuple(jnp.clip(v, -limit.astype(v.dtype), limit.astype(v.dtype)) for v in values)


def clip_grad_value_(
    parameters: Iterable[Tensor] | Tensor, clip_value: float, foreach: bool | None = None
) -> None:
    """Clamp the parameters' gradients in place into ``[-clip_value, clip_value]``."""
    grads = _grads(parameters)
    if not grads:
        return
    limit = jnp.asarray(float(clip_value), jnp.float32)
    for g, new in zip(grads, _clamped(tuple(g.value for g in grads), limit), strict=True):
        overwrite(g, new)
