"""Deferred recording (``speedups._lazy``): pending values, errors at the op, one program a step."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import jax
import jax.monitoring
import numpy as np
import pytest

import tensorplay_jax as tp
from tensorplay_jax.autograd import is_pending, set_deferred, trace_counts
from tensorplay_jax.autograd.speedups import _lazy
from tensorplay_jax.autograd.speedups._fused import FUSE_AFTER


def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    return rng.standard_normal((6, 5)).astype(np.float32), rng.standard_normal((5, 4)).astype(
        np.float32
    )


def _oracle_grad(xn: np.ndarray, wn: np.ndarray) -> np.ndarray:
    """d/dw sum(relu(x @ w)), by hand in NumPy."""
    return xn.T @ ((xn @ wn) > 0).astype(np.float32)


@pytest.fixture
def backend_compiles() -> Iterator[list[str]]:
    """The XLA compilations (jax.monitoring events) made while the test runs."""
    events: list[str] = []

    def listener(name: str, secs: float, **kwargs: object) -> None:
        if name == "/jax/core/compile/backend_compile_duration":
            events.append(name)

    jax.monitoring.register_event_duration_secs_listener(listener)
    yield events
    jax.monitoring.unregister_event_duration_listener(listener)


def test_a_recorded_output_is_pending_and_knows_its_shape():
    xn, wn = _data()
    w = tp.tensor(wn, requires_grad=True)
    y = tp.tensor(xn) @ w
    assert is_pending(y)
    assert (y.shape, y.dtype, y.ndim) == ((6, 4), np.dtype("float32"), 2)
    assert is_pending(y)  # shape and dtype did not run it
    np.testing.assert_allclose(y.numpy(), xn @ wn, rtol=1e-5)
    assert not is_pending(y)


def test_dropout_in_training_keeps_its_pending_input_pending():
    # A pending value is never a tracer: dropout must not run the step so far to find out.
    w = tp.ones((5, 4), requires_grad=True)
    h = tp.ones((6, 5)) @ w
    y = tp.nn.functional.dropout(h, p=0.5, training=True)
    assert is_pending(h) and is_pending(y)
    kept = y.numpy() != 0
    np.testing.assert_allclose(y.numpy()[kept], 10.0)  # 5 ones summed, scaled by 1 / (1 - p)


def test_a_shape_error_raises_at_the_operation():
    w = tp.ones((5, 4), requires_grad=True)
    with pytest.raises(TypeError, match="dot_general requires contracting dimensions"):
        tp.ones((6, 3)) @ w


def test_recurring_step_compiles_nothing_after_warm_up(backend_compiles):
    xn, wn = _data()
    x, w = tp.tensor(xn), tp.tensor(wn, requires_grad=True)

    def step() -> np.ndarray:
        w.grad = None
        (x @ w).relu().sum().backward()
        return w.grad.numpy()

    for _ in range(FUSE_AFTER):
        step()
    before = trace_counts()
    del backend_compiles[:]
    for _ in range(3):
        np.testing.assert_allclose(step(), _oracle_grad(xn, wn), rtol=1e-5)
    assert trace_counts() == before
    assert backend_compiles == []
    assert before.get("<fused forward-backward>", 0) >= 1


def test_retain_graph_through_the_fused_program():
    xn, wn = _data()
    x, w = tp.tensor(xn), tp.tensor(wn, requires_grad=True)
    for _ in range(FUSE_AFTER + 1):
        w.grad = None
        loss = (x @ w).relu().sum()
        loss.backward(retain_graph=True)
        loss.backward()
        np.testing.assert_allclose(w.grad.numpy(), 2 * _oracle_grad(xn, wn), rtol=1e-5)


def test_a_second_graph_pending_beside_the_first_keeps_its_backward():
    xn, wn = _data()
    x, w = tp.tensor(xn), tp.tensor(wn, requires_grad=True)
    for _ in range(FUSE_AFTER + 1):
        w.grad = None
        a = (x @ w).relu().sum()
        b = (w * 3.0).sum()  # pending in the same segment, not on a's graph
        a.backward()  # runs b's forward too, and must keep b's pullback
        b.backward()
        np.testing.assert_allclose(w.grad.numpy(), _oracle_grad(xn, wn) + 3.0, rtol=1e-5)


def test_writing_a_saved_pending_input_in_place_raises_at_backward():
    w = tp.ones(3, requires_grad=True)
    y = w * 2.0
    z = (y * y).sum()  # saves y (pending)
    y.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.backward()


def test_a_graph_recorded_in_one_thread_runs_backward_in_another():
    xn, wn = _data()
    w = tp.tensor(wn, requires_grad=True)
    loss = (tp.tensor(xn) @ w).relu().sum()
    assert is_pending(loss)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            loss.backward()
        except BaseException as e:  # reported in the test thread
            errors.append(e)

    t = threading.Thread(target=run)
    t.start()
    t.join(timeout=60)
    assert not t.is_alive() and errors == []
    np.testing.assert_allclose(w.grad.numpy(), _oracle_grad(xn, wn), rtol=1e-5)


def test_deferral_off_runs_each_operation_at_once():
    old = set_deferred(False)
    try:
        y = tp.ones(3, requires_grad=True) * 2.0
        assert not is_pending(y)
    finally:
        set_deferred(old)


def test_a_leaf_input_replaced_by_a_computed_one_takes_the_full_path():
    x = tp.tensor([1.0, 2.0, 3.0])
    w = tp.ones(3, requires_grad=True)
    for _ in range(FUSE_AFTER + 1):  # (x * w).sum() from a leaf w: a known backward
        w.grad = None
        (x * w).sum().backward()
    v = w * 2.0
    v.numpy()  # v now has a value and a producer: the same pattern, but not a leaf
    w.grad = None
    (x * v).sum().backward()
    assert v.grad is None
    np.testing.assert_allclose(w.grad.numpy(), [2.0, 4.0, 6.0])


def test_data_written_over_a_pending_value_stays():
    w = tp.ones(3, requires_grad=True)
    y = w * 2.0
    y.data = tp.tensor([7.0, 8.0, 9.0])
    (w * 3.0).numpy()  # runs the segment y was recorded in
    np.testing.assert_array_equal(y.numpy(), [7.0, 8.0, 9.0])


def test_a_recurring_segment_keeps_its_inputs_for_the_backward_without_copying_them():
    xn, wn = _data()
    w = tp.tensor(wn, requires_grad=True)
    x = tp.tensor(xn)
    for _ in range(FUSE_AFTER + 1):  # the last runs as one compiled program
        y = (x @ w).relu()
        y.numpy()
    matmul = y.grad_fn.next_edges[0].node
    kept = [leaf for leaf in jax.tree_util.tree_leaves(matmul.vjp) if isinstance(leaf, jax.Array)]
    pointers = {leaf.unsafe_buffer_pointer() for leaf in kept}
    assert x._value.unsafe_buffer_pointer() in pointers  # dW = x.T @ ct keeps x itself
    y.sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), _oracle_grad(xn, wn), rtol=1e-5)


def test_a_fused_segments_pullbacks_reuse_the_per_operation_backward_programs():
    # The operations run first one at a time (deferral off), then as a segment, which
    # a read runs as one program before a node-by-node backward. The segment
    # program's pullbacks must be the ones each operation's own program returns, so
    # the backward compiles nothing new when the forward becomes one program.
    rng = np.random.default_rng(3)
    xn = rng.standard_normal((7, 3)).astype(np.float32)
    x = tp.tensor(xn)
    w = tp.tensor(np.full((3, 3), 0.5, np.float32), requires_grad=True)

    def step() -> np.ndarray:
        w.grad = None
        loss = (x * w.sum(0)).tanh().sum()
        loss.item()  # the forward runs here, before the backward
        loss.backward()
        return w.grad.numpy()

    def oracle() -> np.ndarray:  # d/dw sum(tanh(x * colsum(w))), by hand
        t = np.tanh(xn * w.numpy().sum(0))
        return np.broadcast_to(((1 - t**2) * xn).sum(0), (3, 3))

    was = set_deferred(False)
    try:
        np.testing.assert_allclose(step(), oracle(), rtol=1e-5)
    finally:
        set_deferred(was)
    before = trace_counts()
    for _ in range(_lazy.FUSE_AFTER + 1):
        np.testing.assert_allclose(step(), oracle(), rtol=1e-5)
    after = trace_counts()
    assert after.get("<fused forward>", 0) > before.get("<fused forward>", 0)
    assert after.get("<backward>", 0) == before.get("<backward>", 0)


def _segment_programs() -> int:
    return trace_counts().get("<fused forward>", 0)


def test_a_first_segment_of_new_operations_runs_as_one_program_at_once():
    # Run one at a time, new operations would each compile a program, and the
    # segment's own program would compile again from its FUSE_AFTER-th run.
    w = tp.tensor(np.full((3, 2), 0.25, np.float32), requires_grad=True)
    x = tp.tensor(np.arange(12, dtype=np.float32).reshape(4, 3) / 10)
    before = _segment_programs()
    y = (x @ w).sigmoid().mean()
    np.testing.assert_allclose(
        y.item(), np.mean(1 / (1 + np.exp(-(x.numpy() @ w.numpy())))), rtol=1e-6
    )
    assert _segment_programs() == before + 1


def test_a_changing_graph_of_known_operations_runs_them_one_at_a_time():
    # New patterns made mostly of operations that ran before compile no segment
    # program: a loop whose graph changes every step keeps its per-op programs.
    w = tp.tensor(np.full((3, 2), 0.5, np.float32), requires_grad=True)
    x = tp.tensor(np.ones((6, 3), np.float32))
    before = _segment_programs()
    (x @ w).exp().sum().item()  # new operations: one program
    assert _segment_programs() == before + 1
    for names in (("sin",), ("exp", "sin"), ("sin", "exp")):
        h = x @ w
        for name in names:
            h = getattr(h, name)()
        expected = np.ones((6, 2), np.float32) * 1.5
        for name in names:
            expected = getattr(np, name)(expected)
        np.testing.assert_allclose(h.sum().item(), expected.sum(), rtol=1e-5)
    assert _segment_programs() == before + 1


# --- unrecorded operations on pending values -------------------------------------------


def test_an_unrecorded_operation_on_a_pending_value_joins_the_pending_work():
    w = tp.tensor([1.0, -2.0, 3.0], requires_grad=True)
    y = w * 2.0
    with tp.no_grad():
        z = y + 1.0
    assert is_pending(y) and is_pending(z)
    assert not z.requires_grad and z.grad_fn is None and z.is_leaf  # torch's for a no-grad result
    m = z.argmax()  # and an operation on that one, grad mode on: it records nothing either
    assert is_pending(m)
    assert m.item() == 2
    assert not is_pending(y) and not is_pending(z)
    np.testing.assert_array_equal(z.numpy(), [3.0, -3.0, 7.0])
    assert z.grad_fn is None and z.is_leaf


def test_a_pending_unrecorded_result_may_become_a_leaf_that_requires_grad():
    w = tp.tensor([1.0, 2.0], requires_grad=True)
    y = w * 1.0
    with tp.no_grad():
        z = y * 3.0
    assert is_pending(z)
    z.requires_grad_()
    (z * z).sum().backward()
    np.testing.assert_allclose(z.grad.numpy(), [6.0, 12.0])
    assert w.grad is None  # z is a leaf: nothing flows back through it


def test_a_view_written_with_a_pending_unrecorded_value_does_not_start_requiring_grad():
    w = tp.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    y = w * 2.0
    with tp.no_grad():
        z = y + 0.5
    buf = tp.zeros(2, 4)
    buf[1].copy_(z)
    assert not buf.requires_grad and buf.grad_fn is None
    np.testing.assert_array_equal(buf.numpy(), [[0.0] * 4, [2.5, 4.5, 6.5, 8.5]])


def _agent_steps(n: int) -> tuple[list[int], np.ndarray, list[bool]]:
    """``n`` steps of a REINFORCE agent (a softmax policy, a drawn action, its
    log-probability kept), then the backward: the actions, the gradient, and per step
    whether the draw was still pending when made."""
    from tensorplay_jax.distributions import Categorical

    tp.manual_seed(11)
    w = tp.tensor(np.linspace(-1.0, 1.0, 8, dtype=np.float32).reshape(4, 2), requires_grad=True)
    states = np.random.default_rng(3).standard_normal((n, 1, 4)).astype(np.float32)
    actions, pending, kept = [], [], []
    for s in states:
        probs = tp.softmax(tp.tensor(s) @ w, dim=1)
        m = Categorical(probs)
        a = m.sample()
        pending.append(is_pending(a))
        kept.append(m.log_prob(a))
        actions.append(a.item())
    (-tp.stack(kept).sum()).backward()
    return actions, w.grad.numpy(), pending


def test_a_drawn_action_and_its_log_probability_run_with_the_policy_and_match_the_reference():
    """The draw from a pending policy output stays pending, and the step (policy, draw,
    log-probability) runs when the action is read: the same actions and gradient as the
    reference path, and the gradient of an independent NumPy oracle."""
    actions, grad, pending = _agent_steps(12)
    old = set_deferred(False)
    try:
        ref_actions, ref_grad, ref_pending = _agent_steps(12)
    finally:
        set_deferred(old)
    assert all(pending) and not any(ref_pending)
    assert actions == ref_actions
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-5, atol=1e-6)
    # the oracle: d/dw of -sum_t log softmax(s_t @ w)[a_t]
    wn = np.linspace(-1.0, 1.0, 8, dtype=np.float64).reshape(4, 2)
    states = np.random.default_rng(3).standard_normal((12, 1, 4)).astype(np.float32)
    want = np.zeros_like(wn)
    for s, a in zip(states, actions, strict=True):
        s = s[0].astype(np.float64)
        p = np.exp(s @ wn - np.max(s @ wn))
        p /= p.sum()
        want -= np.outer(s, np.eye(2)[a] - p)
    np.testing.assert_allclose(grad, want, rtol=1e-4, atol=1e-5)
