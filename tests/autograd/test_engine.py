"""The backward engine: accumulation, retain_graph, non-scalar and multiple roots, depth, hooks."""

import sys
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tensorplay_jax as tp
from tensorplay_jax.autograd import (
    GradientEdge,
    attach_outputs,
    get_gradient_edge,
    make_node,
    run_backward,
)


def test_gradients_accumulate_across_backward_calls():
    x = tp.tensor([1.0, 2.0], requires_grad=True)
    (x * x).sum().backward()
    (x * 3).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [5.0, 7.0])


def test_shared_subexpression_sums_contributions():
    x = tp.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    (y * y + y).sum().backward()  # d/dx (4x^2 + 2x) = 8x + 2
    np.testing.assert_allclose(x.grad.numpy(), [10.0, 18.0])


def test_retain_graph():
    x = tp.tensor([1.0, 2.0], requires_grad=True)
    y = (x.exp() * x).sum()
    y.backward(retain_graph=True)
    first = x.grad.numpy().copy()
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * first, rtol=1e-6)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.backward()


def test_many_backwards_with_retain_graph():
    x = tp.ones(2, requires_grad=True)
    y = (x * 2).sum()
    for _ in range(200):
        y.backward(retain_graph=True)
    np.testing.assert_allclose(x.grad.numpy(), [400.0, 400.0])


def test_non_scalar_root_needs_gradient():
    x = tp.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * x
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar"):
        y.backward()
    y.backward(tp.tensor([1.0, 0.0, 2.0]))
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 0.0, 12.0])
    with pytest.raises(RuntimeError, match="has shape"):
        (x * 2).backward(jnp.ones(2))


def test_root_errors():
    with pytest.raises(RuntimeError, match="does not require grad"):
        tp.ones(2).sum().backward()
    with pytest.raises(RuntimeError, match="no roots"):
        run_backward([])
    with pytest.raises(TypeError, match="expected a Tensor or a GradientEdge"):
        run_backward([1.0])


def test_multiple_roots_including_dependent_ones():
    x = tp.tensor([1.0, 2.0], requires_grad=True)
    y = x * 3
    z = (y * y).sum()
    run_backward([z, y], [None, jnp.ones(2)])  # y is also inside z's graph
    np.testing.assert_allclose(x.grad.numpy(), 18 * np.array([1.0, 2.0]) + 3)


def test_leaf_root_and_unused_inputs():
    x = tp.ones(2, requires_grad=True)
    run_backward([x], [jnp.array([3.0, 4.0])])
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 4.0])
    a, b = tp.ones(2, requires_grad=True), tp.ones(2, requires_grad=True)
    (a * 2).sum().backward()
    assert b.grad is None


def test_unused_output_of_multi_output_node():
    x = tp.arange(6.0, requires_grad=True)
    a, b, _ = x.split(2)
    (a.sum() * 2 + b.sum()).backward()
    np.testing.assert_allclose(x.grad.numpy(), [2, 2, 1, 1, 0, 0])


def test_accumulate_callback_instead_of_grad():
    x = tp.tensor([1.0, 2.0], requires_grad=True)
    w = tp.tensor([3.0, 4.0], requires_grad=True)
    got = {}
    run_backward([(x * w).sum()], accumulate=lambda t, g: got.__setitem__(t, g))
    assert set(got) == {x, w}
    np.testing.assert_allclose(got[x], [3.0, 4.0])
    np.testing.assert_allclose(got[w], [1.0, 2.0])
    assert x.grad is None and w.grad is None


def test_deep_graph_has_no_recursion_limit():
    x = tp.ones(2, requires_grad=True)
    y = x
    depth = max(10_000, sys.getrecursionlimit() * 5)
    for _ in range(depth):
        y = y + 1.0
    (y * 1.0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0, 1.0])
    del y  # freeing the chain must not recurse either


def test_recv_and_send_nodes_as_rpc_would_build_them():
    """A recv leaf (backward = a callback) and a send root (a GradientEdge fed later)."""
    sent_back = []
    recv = make_node(lambda grads: sent_back.append(grads[0]) or (), (), name="RecvRpcBackward")
    (received,) = attach_outputs(recv, [jnp.array([1.0, 2.0])])
    assert received.requires_grad and received.grad_fn is recv
    (received * 5).sum().backward()
    np.testing.assert_allclose(sent_back[0], [5.0, 5.0])

    w = tp.tensor([2.0, 3.0], requires_grad=True)
    to_send = w * w
    send = make_node(lambda grads: grads, [to_send], name="SendRpcBackward")
    got = {}
    run_backward(
        [GradientEdge(send, 0)],
        [jnp.array([1.0, 10.0])],
        accumulate=lambda t, g: got.__setitem__(t, g),
    )
    np.testing.assert_allclose(got[w], [4.0, 60.0])


def test_backward_inside_a_jax_transformation_says_the_tape_records_nothing_there():
    def step(v):
        t = tp.Tensor(v).requires_grad_()
        (t * t).sum().backward()
        return t.grad.value

    for transform in (jax.jit, jax.grad, jax.vmap):
        fn = transform(lambda v: step(v).sum()) if transform is jax.grad else transform(step)
        with pytest.raises(RuntimeError, match=r"inside a JAX transformation.*jax\.grad"):
            fn(jnp.arange(3.0))


def test_function_node_with_inputs_that_need_no_grad():
    a, b = tp.ones(2, requires_grad=True), tp.ones(2)
    node = make_node(lambda g: (g[0] * 2, g[0] * 3), [a, b])
    assert node.next_edges[1] is None
    (out,) = attach_outputs(node, [a.value + b.value])
    out.sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), [2.0, 2.0])
    assert get_gradient_edge(a).node is get_gradient_edge(a).node
    with pytest.raises(RuntimeError, match="does not require grad"):
        get_gradient_edge(b)
    with pytest.raises(ValueError, match="has 1 outputs"):
        attach_outputs(node, [1, 2])


def test_wrong_number_of_gradients_from_function_node():
    a = tp.ones(2, requires_grad=True)
    node = make_node(lambda g: (), [a], name="Bad")
    (out,) = attach_outputs(node, [a.value])
    with pytest.raises(RuntimeError, match="Bad: backward returned 0 gradients for 1 inputs"):
        out.sum().backward()


def test_concurrent_backward_from_threads():
    errors = []

    def work(seed):
        try:
            for _ in range(10):
                x = tp.tensor(np.full(3, float(seed), np.float32), requires_grad=True)
                with tp.no_grad() if seed < 0 else tp.enable_grad():
                    ((x * x).sum() * 0.5).backward()
                np.testing.assert_allclose(x.grad.numpy(), np.full(3, float(seed)))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_grad_mode_is_thread_local():
    seen = []
    with tp.no_grad():
        t = threading.Thread(target=lambda: seen.append(tp.is_grad_enabled()))
        t.start()
        t.join()
    assert seen == [True]


def test_all_none_gradients_skip_unless_run_without_grads():
    calls = []
    hit = make_node(lambda g: calls.append(g) or (), (), run_without_grads=True)
    skip = make_node(lambda g: calls.append("skip") or (), ())
    (h,) = attach_outputs(hit, [jnp.ones(1)])
    (s,) = attach_outputs(skip, [jnp.ones(1)])
    passthrough = make_node(lambda g: (None, None), [h, s])
    (root,) = attach_outputs(passthrough, [jnp.ones(1)])
    root.sum().backward()
    assert calls == [(None,)]


def test_release_graph():
    from tensorplay_jax.autograd import release_graph

    x = tp.ones(2, requires_grad=True)
    y = (x.exp() * 2).sum()
    y.backward(retain_graph=True)
    assert release_graph([y]) == 3
    assert y.grad_fn.released
    with pytest.raises(RuntimeError, match="second time"):
        y.backward()
    assert release_graph([y]) == 0


def test_concurrent_backward_into_one_shared_leaf():
    w = tp.ones(3, requires_grad=True)
    graphs = [(w * float(i)).sum() for i in range(1, 9)]
    threads = [threading.Thread(target=g.backward) for g in graphs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    np.testing.assert_allclose(w.grad.numpy(), [36.0] * 3)


def test_autograd_grad_returns_without_accumulating():
    x = tp.tensor([1.0, 2.0], requires_grad=True)
    w = tp.tensor([3.0, 4.0], requires_grad=True)
    unused = tp.ones(1, requires_grad=True)
    y = x * w
    gx, gw, gu = tp.autograd.grad(y, [x, w, unused], jnp.ones(2), allow_unused=True)
    np.testing.assert_allclose(gx.numpy(), [3.0, 4.0])
    np.testing.assert_allclose(gw.numpy(), [1.0, 2.0])
    assert gu is None and x.grad is None and w.grad is None
    with pytest.raises(RuntimeError, match="index 0 appears to not have been used in the graph"):
        tp.autograd.grad((x * 2).sum(), [unused])
    with pytest.raises(RuntimeError, match="index 0 appears to not have been used in the graph"):
        tp.autograd.grad((x * 2).sum(), [x * 2])  # a result, but not of this graph
    with pytest.raises(RuntimeError, match="One of the differentiated Tensors does not require"):
        tp.autograd.grad((x * 2).sum(), [tp.ones(2)])


def test_nodes_of_one_operation_share_one_name_object():
    """A node's name is one object per operation name (a graph of many nodes does not hold
    one string object each), and it still answers tensorplay's ``name()``."""
    x = tp.ones(2, requires_grad=True)
    a, b = (x * 2).grad_fn, (x * 3).grad_fn
    assert a.name is b.name
    assert a.name == "MulBackward" and a.name() == "MulBackward0"
