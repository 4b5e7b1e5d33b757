"""Functional mode: ``differentiable_rpc`` under ``jax.grad``/``jax.vjp``/``jax.value_and_grad``."""

from __future__ import annotations

from tests.distributed.autograd import _functional_workers as FW
from tests.distributed.autograd import _workers as W


def test_differentiable_rpc(workers):
    out = workers(W.functional, 3, timeout=180)
    assert "functional ok" in out[0].stdout, out[0]


def test_jax_mode_grad_jit_vmap_checkpoint_and_errors(workers):
    out = workers(FW.jax_mode, 2, timeout=300)
    assert "jax mode ok" in out[0].stdout, out[0]


def test_tape_mode_under_jit_trains_remote_parameters(workers):
    out = workers(FW.tape_jit, 2, timeout=180)
    assert "tape jit ok" in out[0].stdout, out[0]
