"""``RRef.backward(dist_autograd_ctx_id=-1, retain_graph=False)`` over a job of two workers
(this process is w0, w1 owns the parameter).

Gradients are checked against ``jax.grad`` of the same computation (no tape, no RPC): a
user RRef (the pass starts on its owner), an owner RRef, ``retain_graph``, the local
backward (-1) here and on the owner, and the errors.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay_jax as tp
import tensorplay_jax.distributed.autograd as dist_autograd
from tensorplay_jax.distributed import rpc
from tests._worker import expect, npa
from tests.distributed.autograd import _rref_workers as W

pytestmark = pytest.mark.workers(2, names=["w0", "w1"], timeout=120)


@pytest.fixture(autouse=True)
def fresh_param(dist_workers_module):
    """A fresh parameter on w1 for every test; the ``jax.grad`` oracle ``(d/dx, d/dp)``."""
    rpc.rpc_sync("w1", W.reset_param)
    return W.oracle()


def _close(a, b, what: str) -> None:
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6, err_msg=what)


def test_user_rref_backward_starts_on_the_owner_and_reaches_this_worker(fresh_param):
    gx, gp = fresh_param
    with dist_autograd.context() as ctx:
        x = tp.tensor(W.X0, requires_grad=True)
        loss = rpc.remote("w1", W.loss_with_param, args=(x,))
        loss.backward(ctx)
        _close(dist_autograd.get_gradients(ctx)[x], gx, "x")
        _close(rpc.rpc_sync("w1", W.param_grad_in, args=(ctx,)), gp, "p")


def test_retain_graph_allows_more_passes_that_accumulate(fresh_param):
    gx, gp = fresh_param
    with dist_autograd.context() as ctx:
        x = tp.tensor(W.X0, requires_grad=True)
        loss = rpc.remote("w1", W.loss_with_param, args=(x,))
        loss.backward(ctx, retain_graph=True)
        loss.backward(dist_autograd_ctx_id=ctx, retain_graph=True)
        loss.backward(ctx)
        _close(dist_autograd.get_gradients(ctx)[x], 3 * gx, "x")
        _close(rpc.rpc_sync("w1", W.param_grad_in, args=(ctx,)), 3 * gp, "p")
        expect(RuntimeError, ["a second time"], loss.backward, ctx)


def test_owner_rref_backward_through_a_call_to_w1(fresh_param):
    gx, gp = fresh_param
    with dist_autograd.context() as ctx:
        x = tp.tensor(W.X0, requires_grad=True)
        y = rpc.rpc_sync("w1", W.times_param, args=(x,))
        mine = rpc.RRef((tp.tanh(y) ** 2).sum())
        mine.backward(ctx)
        _close(dist_autograd.get_gradients(ctx)[x], gx, "x")
        _close(rpc.rpc_sync("w1", W.param_grad_in, args=(ctx,)), gp, "p")
        assert x.grad is None  # distributed gradients stay in the context


def test_local_backward_here_fills_grad(fresh_param):
    gx, gp = fresh_param
    x = tp.tensor(W.X0, requires_grad=True)
    p = tp.tensor(W.P0, requires_grad=True)
    rpc.RRef((tp.tanh(x * p) ** 2).sum()).backward()
    _close(npa(x.grad), gx, "x")
    _close(npa(p.grad), gp, "p")


def test_local_backward_asked_from_a_user_runs_on_the_owner(fresh_param):
    _, gp = fresh_param
    assert rpc.rpc_sync("w1", W.param_dot_grad) is None
    rpc.remote("w1", W.loss_with_param, args=(tp.tensor(W.X0),)).backward()
    _close(rpc.rpc_sync("w1", W.param_dot_grad), gp, "p on the owner")


@pytest.mark.parametrize(
    "make, arg, exc, words",
    [
        (lambda: rpc.remote("w1", W.vector), "ctx", RuntimeError, ["shape (3,)", "scalar"]),
        (lambda: rpc.remote("w1", max, args=(1, 2)), "ctx", TypeError, ["holds a int"]),
        (lambda: rpc.RRef(tp.ones(1)), "1", TypeError, ["must be an int"]),
        (lambda: rpc.RRef(tp.ones(1)), "ctx", RuntimeError, ["does not require grad"]),
    ],
    ids=["not-a-scalar", "not-a-tensor", "context-id-not-an-int", "no-grad"],
)
def test_backward_errors(make, arg, exc, words):
    with dist_autograd.context() as ctx:
        expect(exc, words, make().backward, ctx if arg == "ctx" else arg)


def test_backward_in_an_unknown_context_raises():
    loss = rpc.remote("w1", W.loss_with_param, args=(tp.tensor(W.X0),))
    expect(RuntimeError, ["Could not find autograd context with id: 12345"], loss.backward, 12345)


def test_backward_of_a_timed_out_remote_raises_the_timeout():
    slow = rpc.remote("w1", W.slow_loss, args=(1.0,), timeout=0.2)
    words = ["RPC ran for more than 0.2 seconds", "slow_loss"]
    expect(rpc.RpcTimeoutError, words, slow.backward)
