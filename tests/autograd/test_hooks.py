"""``Tensor.register_hook``, ``autograd.backward``, ``grad_fn.next_functions``, as torch has them.

Expected gradients are written out by hand (the graphs are a line or two); messages
are torch's. Hooked graphs run with deferred recording on and off, and for enough
steps that the fused and known compiled passes would take over if hooks did not stop
them.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay_jax as tp
from tensorplay_jax.autograd import AccumulateGrad


def _close(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)


def test_leaf_hook_replaces_the_accumulated_gradient(deferred):
    x = tp.ones(3, requires_grad=True)
    x.register_hook(lambda g: g * 2)
    (x * 3).sum().backward()
    _close(x.grad.numpy(), np.full(3, 6.0))


def test_non_leaf_hook_changes_what_flows_on(deferred):
    x = tp.ones(3, requires_grad=True)
    y = x * 3
    y.register_hook(lambda g: g + 1)  # d loss/dy = 1 -> 2, then * 3
    (y * 1.0).sum().backward()
    _close(x.grad.numpy(), np.full(3, 6.0))


def test_hook_on_the_root_itself(deferred):
    x = tp.ones(3, requires_grad=True)
    r = x * 2
    r.register_hook(lambda g: g * 10)
    r.sum().backward()
    _close(x.grad.numpy(), np.full(3, 20.0))


def test_hooks_run_in_order_and_none_keeps_the_gradient():
    seen = []
    x = tp.ones(2, requires_grad=True)
    x.register_hook(lambda g: g * 2)
    x.register_hook(lambda g: seen.append(g.numpy().tolist()))
    (x * 3).sum().backward()
    assert seen == [[6.0, 6.0]]
    _close(x.grad.numpy(), [6.0, 6.0])


def test_removed_hook_no_longer_runs():
    x = tp.ones(2, requires_grad=True)
    handle = x.register_hook(lambda g: g * 2)
    handle.remove()
    (x * 3).sum().backward()
    _close(x.grad.numpy(), [3.0, 3.0])


@pytest.mark.parametrize("deferred_flag", [True, False])
def test_hook_applies_on_every_step_of_a_recurring_graph(deferred_flag):
    old = tp.autograd.set_deferred(deferred_flag)
    try:
        w = tp.ones(3, requires_grad=True)
        w.register_hook(lambda g: g * 2)
        for _ in range(8):
            w.grad = None
            ((w * 3.0).sum() * 1.0).backward()
            _close(w.grad.numpy(), np.full(3, 6.0))
    finally:
        tp.autograd.set_deferred(old)


def test_autograd_grad_sees_the_leaf_hook():
    x = tp.ones(2, requires_grad=True)
    x.register_hook(lambda g: g * 2)
    (g,) = tp.autograd.grad((x * 3).sum(), x)
    _close(g.numpy(), [6.0, 6.0])


def test_hook_on_a_tensor_without_grad_is_torchs_error():
    with pytest.raises(RuntimeError, match="cannot register a hook on a tensor that doesn't"):
        tp.ones(2).register_hook(lambda g: g)


def test_hook_that_changes_the_shape_is_torchs_error():
    x = tp.ones(3, requires_grad=True)
    x.register_hook(lambda g: g[:2])
    with pytest.raises(RuntimeError, match="has changed the size of value"):
        (x * 2).sum().backward()


def test_autograd_backward_several_roots_and_gradients():
    a = tp.ones(2, requires_grad=True)
    tp.autograd.backward([(a * 2).sum(), a * 3], [None, tp.tensor([1.0, 2.0])])
    _close(a.grad.numpy(), [5.0, 8.0])


def test_autograd_backward_inputs_limits_accumulation():
    a = tp.ones(2, requires_grad=True)
    b = tp.ones(2, requires_grad=True)
    tp.autograd.backward((a * b * 3).sum(), inputs=[b])
    assert a.grad is None
    _close(b.grad.numpy(), [3.0, 3.0])


def test_autograd_backward_retain_graph():
    a = tp.ones(2, requires_grad=True)
    loss = (a * a).sum()
    tp.autograd.backward([loss], retain_graph=True)
    tp.autograd.backward([loss])
    _close(a.grad.numpy(), [4.0, 4.0])


def test_autograd_backward_count_mismatch_is_an_error():
    a = tp.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="got 2 grad_tensors for 1 tensors"):
        tp.autograd.backward([a * 2], [tp.ones(2), tp.ones(2)])


def test_next_functions_of_an_operation():
    t1 = tp.ones(2, requires_grad=True)
    t2 = tp.ones(2)
    t3 = tp.ones(2, requires_grad=True)
    y = t1 * t2 + t3
    (mul, i0), (acc, i1) = y.grad_fn.next_functions
    assert mul.name == "MulBackward"
    assert (i0, i1) == (0, 0)
    assert isinstance(acc, AccumulateGrad) and acc.variable is t3
    # t2 needs no grad: a built-in operation keeps no edge for it (torch lists (None, 0))
    ((leaf, _),) = mul.next_functions
    assert leaf.variable is t1


# ---------------------------------------------------- register_post_accumulate_grad_hook
def test_post_accumulate_hook_sees_the_accumulated_grad(deferred):
    w = tp.ones(2, requires_grad=True)
    w.grad = tp.ones(2)  # what is there already: the hook sees the sum
    seen = []
    w.register_post_accumulate_grad_hook(lambda t: seen.append(t.grad.numpy().copy()))
    (w * 3).sum().backward()
    assert len(seen) == 1
    _close(seen[0], np.full(2, 4.0))


def test_post_accumulate_hooks_run_once_per_leaf_on_every_step(deferred):
    a, b = tp.ones(2, requires_grad=True), tp.ones(2, requires_grad=True)
    order = []
    for _ in range(4):  # past the steps where a compiled pass would take over
        a.grad = b.grad = None
        ha = a.register_post_accumulate_grad_hook(lambda t: order.append("a"))
        hb = b.register_post_accumulate_grad_hook(lambda t: order.append("b"))
        ((b * 2) * a).sum().backward()
        ha.remove()
        hb.remove()
    assert sorted(order) == ["a"] * 4 + ["b"] * 4


def test_post_accumulate_hook_on_a_non_leaf_is_torchs_error():
    x = tp.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="cannot be registered on non-leaf tensors"):
        (x * 2).register_post_accumulate_grad_hook(lambda t: None)


def test_queued_callback_runs_once_after_every_node():
    a, b = tp.ones(2, requires_grad=True), tp.ones(2, requires_grad=True)
    events = []

    def hook(t):
        events.append("leaf")
        if len(events) == 1:
            tp.autograd.queue_callback(lambda: events.append("end"))

    a.register_post_accumulate_grad_hook(hook)
    b.register_post_accumulate_grad_hook(hook)
    (a * b).sum().backward()
    assert events == ["leaf", "leaf", "end"]


def test_queue_callback_outside_backward_is_torchs_error():
    with pytest.raises(RuntimeError, match="Final callbacks can only be installed during backward"):
        tp.autograd.queue_callback(lambda: None)
