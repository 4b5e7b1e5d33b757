"""``Node.register_prehook`` and ``Node.register_hook``: hooks on a node's backward, as in torch.

Each expectation (what a hook is called with, in which order, what its result
replaces, the messages) was read off torch 2.13 running the same graph; the values
are written out by hand. Hooked graphs run with deferred recording on and off, and
for enough steps that the fused and known compiled passes would take over if the
hooks did not stop them.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import tensorplay_jax as tp
from tensorplay_jax.autograd import AccumulateGrad, run_backward
from tensorplay_jax.distributed.autograd import _context


def _lists(grads):
    return [None if g is None else g.tolist() for g in grads]


def test_order_of_tensor_hook_prehook_and_hook_on_an_operation_and_a_leaf(deferred):
    t = tp.ones(3, requires_grad=True)
    a = t * 2
    log = []
    a.grad_fn.register_hook(lambda gi, go: log.append(("op post", _lists(gi), _lists(go))))
    a.grad_fn.register_prehook(lambda go: log.append(("op pre", _lists(go))))
    acc = a.grad_fn.next_functions[0][0]
    acc.register_hook(lambda gi, go: log.append(("leaf post", _lists(gi), _lists(go))))
    acc.register_prehook(lambda go: log.append(("leaf pre", _lists(go))))
    a.register_hook(lambda g: log.append(("tensor", g.tolist())))
    t.register_post_accumulate_grad_hook(lambda x: log.append(("post accumulate", x.grad.tolist())))
    a.sum().backward()
    ones, twos = [1.0] * 3, [2.0] * 3
    assert log == [
        ("tensor", ones),
        ("op pre", [ones]),
        ("op post", [twos], [ones]),
        ("leaf pre", [twos]),
        ("post accumulate", twos),
        ("leaf post", [], [twos]),
    ]


def test_prehook_result_replaces_the_gradients_the_node_receives(deferred):
    x = tp.ones(2, requires_grad=True)
    y = x * 3
    y.grad_fn.register_prehook(lambda go: (go[0] * 2,))
    y.sum().backward()
    assert x.grad.tolist() == [6.0, 6.0]


def test_hook_result_replaces_the_gradients_the_node_passes_on(deferred):
    x = tp.ones(2, requires_grad=True)
    y = x * 3
    y.grad_fn.register_hook(lambda gi, go: (gi[0] * 10,))
    y.sum().backward()
    assert x.grad.tolist() == [30.0, 30.0]


def test_leaf_prehook_changes_what_is_accumulated_and_the_hook_sees_it(deferred):
    x = tp.ones(2, requires_grad=True)
    x.register_hook(lambda g: g + 1)  # 3 -> 4: the leaf's Tensor hook runs first
    y = x * 3
    acc = y.grad_fn.next_functions[0][0]
    assert isinstance(acc, AccumulateGrad)
    seen = []
    acc.register_prehook(lambda go: (go[0] * 10,))
    acc.register_hook(lambda gi, go: seen.append((gi, go[0].tolist(), x.grad.tolist())))
    y.sum().backward()
    assert seen == [((), [40.0, 40.0], [40.0, 40.0])]
    assert x.grad.tolist() == [40.0, 40.0]


def test_prehooks_chain_in_registration_order(deferred):
    x = tp.ones(2, requires_grad=True)
    y = x * 1
    y.grad_fn.register_prehook(lambda go: (go[0] + 1,))
    y.grad_fn.register_prehook(lambda go: (go[0] * 10,))
    y.sum().backward()
    assert x.grad.tolist() == [20.0, 20.0]


def test_a_prehook_returning_none_for_a_gradient_stops_it(deferred):
    x = tp.ones(2, requires_grad=True)
    y = x * 3
    y.grad_fn.register_prehook(lambda go: (None,))
    y.sum().backward()
    assert x.grad is None


def test_an_output_without_gradient_reaches_the_prehook_as_none():
    a = tp.ones(4, requires_grad=True)
    p, _ = a.split(2)
    seen = []
    p.grad_fn.register_prehook(lambda go: seen.append(_lists(go)))
    p.sum().backward()
    assert seen == [[[1.0, 1.0], None]]


def test_the_leaf_node_of_t_plus_t_runs_its_hooks_once(deferred):
    # torch's test_post_hooks (dist_autograd_test.py), locally: both edges of t + t
    # lead to one AccumulateGrad, whose hooks run once per backward.
    calls = []
    t = tp.rand(10, 10, requires_grad=True)
    a = t + t
    first, second = a.grad_fn.next_functions[0][0], a.grad_fn.next_functions[1][0]
    assert first is second
    first.register_hook(lambda gi, go: calls.append(1))
    first.register_hook(lambda gi, go: calls.append(2))
    second.register_hook(lambda gi, go: calls.append(2))
    a.sum().backward()
    assert sum(calls) == 5
    np.testing.assert_allclose(t.grad.numpy(), np.full((10, 10), 2.0))


def test_hooks_run_on_every_step_of_a_recurring_graph(deferred):
    w = tp.ones(2, requires_grad=True)
    calls = []
    for step in range(6):  # the compiled passes would take over by the fourth run
        y = (w * 2).sum()
        y.grad_fn.next_functions[0][0].register_prehook(lambda go: (go[0] * 0.5,))
        acc = w._gradient_edge().node
        if step == 0:
            acc.register_hook(lambda gi, go: calls.append(go[0].tolist()))
        w.grad = None
        y.backward()
        assert w.grad.tolist() == [1.0, 1.0], step
    assert calls == [[1.0, 1.0]] * 6


def test_retained_graph_runs_the_hook_on_each_backward():
    d = tp.ones(2, requires_grad=True)
    e = (d * 2).sum()
    calls = []
    e.grad_fn.register_hook(lambda gi, go: calls.append(1))
    e.backward(retain_graph=True)
    e.backward()
    assert len(calls) == 2


def test_autograd_grad_runs_no_hook_of_the_captured_leaf():
    x = tp.ones(2, requires_grad=True)
    calls = []
    x.register_hook(lambda g: calls.append("tensor") or g + 1)
    x.register_post_accumulate_grad_hook(lambda t: calls.append("post accumulate"))
    y = x * 2
    acc = y.grad_fn.next_functions[0][0]
    acc.register_prehook(lambda go: calls.append("leaf pre"))
    acc.register_hook(lambda gi, go: calls.append("leaf post"))
    y.grad_fn.register_hook(lambda gi, go: calls.append("op post"))
    (g,) = tp.autograd.grad(y.sum(), x)
    assert calls == ["op post", "tensor"]
    assert g.tolist() == [3.0, 3.0]


def test_removed_node_hook_no_longer_runs():
    x = tp.ones(2, requires_grad=True)
    y = x * 2
    h = y.grad_fn.register_hook(lambda gi, go: (gi[0] * 0,))
    h.remove()
    y.sum().backward()
    assert x.grad.tolist() == [2.0, 2.0]


def test_hook_returning_a_list_is_torchs_error():
    x = tp.ones(2, requires_grad=True)
    y = x * 2
    y.grad_fn.register_hook(lambda gi, go: [gi[0]])
    with pytest.raises(TypeError, match="expected tuple, but hook returned 'list'"):
        y.sum().backward()


def test_hook_returning_the_wrong_count_is_torchs_error():
    x = tp.ones(2, requires_grad=True)
    y = x * 2
    y.grad_fn.register_prehook(lambda go: (go[0], go[0]))
    with pytest.raises(RuntimeError, match=r"incorrect number of values \(got 2, but expected 1\)"):
        y.sum().backward()


def test_leaf_hook_returning_gradients_is_torchs_error():
    x = tp.ones(2, requires_grad=True)
    y = x * 2
    y.grad_fn.next_functions[0][0].register_hook(lambda gi, go: go)
    with pytest.raises(RuntimeError, match=r"incorrect number of values \(got 1, but expected 0\)"):
        y.sum().backward()


def test_prehook_changing_the_shape_is_torchs_error():
    x = tp.ones(2, requires_grad=True)
    y = x * 2
    y.grad_fn.register_prehook(lambda go: (go[0][:1],))
    with pytest.raises(RuntimeError, match="has changed the size of value"):
        y.sum().backward()


def test_a_hook_that_is_not_callable_is_refused():
    y = tp.ones(2, requires_grad=True) * 2
    with pytest.raises(TypeError, match="register_hook: hook must be callable"):
        y.grad_fn.register_hook(1)
    with pytest.raises(TypeError, match="register_prehook: hook must be callable"):
        y.grad_fn.register_prehook(None)


def test_leaf_node_hooks_run_when_the_gradient_goes_into_a_distributed_context(deferred):
    # distributed autograd's backward: the local tape into a context (its ``accumulate``)
    ids = itertools.count(7_100_001)
    t = tp.ones(3, requires_grad=True)
    calls = []
    for _ in range(5):  # past the point where a compiled backward would take over
        a = t * 2
        acc = a.grad_fn.next_functions[0][0]
        if not calls:
            acc.register_prehook(lambda go: (go[0] + 1,))
            acc.register_hook(lambda gi, go: calls.append(go[0].tolist()))
        ctx = _context.DistAutogradContext(next(ids))
        run_backward([a.sum()], retain_graph=True, accumulate=ctx.accumulate)
        assert np.asarray(ctx.gradient_arrays()[t]).tolist() == [3.0, 3.0, 3.0]
    assert calls == [[3.0, 3.0, 3.0]] * 5
    assert t.grad is None


def test_backward_with_inputs_runs_no_hook_of_a_leaf_left_out(deferred):
    a, b = tp.ones(2, requires_grad=True), tp.ones(2, requires_grad=True)
    calls = []
    a.register_hook(lambda g: calls.append("a tensor"))
    b.register_hook(lambda g: calls.append("b tensor"))
    a.register_post_accumulate_grad_hook(lambda t: calls.append("a post accumulate"))
    b.register_post_accumulate_grad_hook(lambda t: calls.append("b post accumulate"))
    y = a * b
    y.grad_fn.next_functions[1][0].register_prehook(lambda go: calls.append("b leaf pre"))
    tp.autograd.backward(y.sum(), inputs=[a])
    assert calls == ["a tensor", "a post accumulate"]
    assert a.grad.tolist() == [1.0, 1.0]
    assert b.grad is None


def test_autograd_grad_runs_no_hook_of_a_leaf_not_asked_for(deferred):
    a, b = tp.ones(2, requires_grad=True), tp.ones(2, requires_grad=True)
    calls = []
    a.register_hook(lambda g: calls.append("a tensor"))
    b.register_hook(lambda g: calls.append("b tensor"))
    (g,) = tp.autograd.grad((a * b).sum(), a)
    assert calls == ["a tensor"]
    assert g.tolist() == [1.0, 1.0]
    assert a.grad is None and b.grad is None
