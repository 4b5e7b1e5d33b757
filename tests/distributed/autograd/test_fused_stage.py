"""A stage's backward runs as one compiled program up to its recv node (``speedups._fused``).

Two processes: this one (the driver, w0) and w1 (the stage). The driver sends ``x`` to
w1, whose graph then ends at the recv node that sends ``x``'s gradient back. Since the
stage's operations are new to w1, its forward is compiled as one program when the call
is served, and its backward as one program at its first run, with the recv node called
on what that program returns. Gradients are checked against the hand-written oracle.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay_jax as tp
import tensorplay_jax.distributed.autograd as dist_autograd
from tensorplay_jax.distributed import rpc
from tests.distributed.autograd import _fused_stage_workers as W

pytestmark = pytest.mark.workers(2, names=["w0", "w1"], timeout=120)


def _step() -> tuple[np.ndarray, np.ndarray]:
    """One step through w1: d/dx here and d/dw on w1."""
    x = tp.tensor(W.X0, requires_grad=True)
    with dist_autograd.context() as ctx:
        y = rpc.rpc_sync("w1", W.stage, args=(x,))
        dist_autograd.backward(ctx, [(y * tp.tensor(W.C0)).sum()])
        gx = np.asarray(dist_autograd.get_gradients(ctx)[x])
        gw = rpc.rpc_sync("w1", W.weight_grad, args=(ctx,))
    return gx, gw


def test_a_new_stage_runs_its_backward_as_one_program_ending_at_its_recv_node(
    dist_workers_module,
):
    rpc.rpc_sync("w1", W.reset)
    want_x, want_w = W.oracle()
    fused, by_node = rpc.rpc_sync("w1", W.counts)
    gx, gw = _step()
    np.testing.assert_allclose(gx, want_x, rtol=1e-5, atol=1e-6, err_msg="x's gradient")
    np.testing.assert_allclose(gw, want_w, rtol=1e-5, atol=1e-6, err_msg="w's gradient")
    assert rpc.rpc_sync("w1", W.counts) == (fused + 1, by_node), "(fused, one by one) on w1"


def test_later_steps_of_the_stage_compile_nothing_new(dist_workers_module):
    rpc.rpc_sync("w1", W.reset)
    want_x, want_w = W.oracle()
    _step()
    counts = rpc.rpc_sync("w1", W.counts)
    for _ in range(3):
        gx, gw = _step()
        np.testing.assert_allclose(gx, want_x, rtol=1e-5, atol=1e-6, err_msg="x's gradient")
        np.testing.assert_allclose(gw, want_w, rtol=1e-5, atol=1e-6, err_msg="w's gradient")
    assert rpc.rpc_sync("w1", W.counts) == counts
