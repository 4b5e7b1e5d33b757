"""A custom ``autograd.Function`` under distributed autograd, over a job of two workers
(this process is w0, w1 a real worker process).

The Function's output crosses RPC (made here and sent, or made on w1 from a Tensor
that arrived) and ``dist_autograd.backward`` runs its backward; gradients are checked
against ``jax.grad`` of the same computation. Also: an error raised in a Function's
backward on w1 fails the pass here, and a leaf's ``register_hook`` applies to the
gradient that comes back for it.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay_jax as tp
import tensorplay_jax.distributed.autograd as dist_autograd
from tensorplay_jax.distributed import rpc
from tests.distributed.autograd import _function_workers as W

pytestmark = pytest.mark.workers(2, names=["w0", "w1"], timeout=120)


def _close(a, b, what: str) -> None:
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6, err_msg=what)


@pytest.mark.parametrize("deferred", [True, False])
def test_function_output_sent_over_rpc(dist_workers_module, deferred):
    old = tp.autograd.set_deferred(deferred)
    try:
        with dist_autograd.context() as ctx:
            x = tp.tensor(W.X0, requires_grad=True)
            y = W.Cube.apply(x * 1.0)  # a Function node between x and the send
            loss = rpc.rpc_sync("w1", W.times_w, args=(y,)).sum()
            dist_autograd.backward(ctx, [loss])
            _close(dist_autograd.get_gradients(ctx)[x], W.oracle(), "x")
            assert x.grad is None
    finally:
        tp.autograd.set_deferred(old)


def test_function_applied_on_the_callee(dist_workers_module):
    before = rpc.rpc_sync("w1", W.backward_calls)
    with dist_autograd.context() as ctx:
        x = tp.tensor(W.X0, requires_grad=True)
        loss = rpc.rpc_sync("w1", W.cube_times_w, args=(x,)).sum()
        dist_autograd.backward(ctx, [loss])
        _close(dist_autograd.get_gradients(ctx)[x], W.oracle(), "x")
    assert rpc.rpc_sync("w1", W.backward_calls) == before + 1


def test_error_in_a_function_backward_on_the_callee_fails_the_pass(dist_workers_module):
    with dist_autograd.context() as ctx:
        x = tp.tensor(W.X0, requires_grad=True)
        loss = rpc.rpc_sync("w1", W.fail_on_backward, args=(x,)).sum()
        with pytest.raises(RuntimeError, match="Simulate error on backward pass"):
            dist_autograd.backward(ctx, [loss])


def test_leaf_hook_applies_to_the_gradient_that_comes_back(dist_workers_module):
    x = tp.tensor(W.X0, requires_grad=True)
    handle = x.register_hook(lambda g: g * 2.0)
    try:
        with dist_autograd.context() as ctx:
            loss = rpc.rpc_sync("w1", W.times_w, args=(x,)).sum()  # x itself is sent
            dist_autograd.backward(ctx, [loss])
            _close(dist_autograd.get_gradients(ctx)[x], 2.0 * W.W0, "x")
    finally:
        handle.remove()
