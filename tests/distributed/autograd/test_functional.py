"""Functional mode: ``differentiable_rpc`` under ``jax.grad``/``jax.vjp``/``jax.value_and_grad``."""

from __future__ import annotations

from tests.distributed.autograd import _workers as W


def test_differentiable_rpc(workers):
    out = workers(W.functional, 3, timeout=180)
    assert "functional ok" in out[0].stdout, out[0]
