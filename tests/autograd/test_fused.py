"""The fused backward: a recurring graph shape runs as one compiled call, same gradients."""

from __future__ import annotations

import numpy as np

import tensorplay_jax as tp
from tensorplay_jax.autograd import trace_counts
from tensorplay_jax.autograd.speedups import _fused
from tensorplay_jax.autograd.speedups._state import STATE


def _fused_compiles() -> int:
    """Compilations of a fused backward, alone or with its pending forward (``_lazy``)."""
    counts = trace_counts()
    return counts.get("<fused backward>", 0) + counts.get("<fused forward-backward>", 0)


def _step(x, w):
    w.grad = None
    ((x @ w).relu() * 2.0).sum().backward()
    return w.grad.numpy()


def test_recurring_graph_fuses_with_the_same_gradient():
    x = tp.tensor(np.arange(6, dtype=np.float32).reshape(2, 3) - 2.0)
    w = tp.tensor(np.ones((3, 4), np.float32) * 0.5, requires_grad=True)
    xn = x.numpy()
    mask = (xn @ w.numpy()) > 0
    expected = xn.T @ (2.0 * mask)  # d/dw sum(2 relu(x w))
    before = _fused_compiles()
    for _ in range(_fused.FUSE_AFTER + 3):
        np.testing.assert_allclose(_step(x, w), expected, rtol=1e-6)
    assert _fused_compiles() == before + 1  # compiled once


def test_graphs_of_new_shapes_never_compile_fused():
    STATE.seen_shapes.clear()  # every shape below is new to this process, whatever ran before
    STATE.known.clear()
    before = _fused_compiles()
    x = tp.ones(3, requires_grad=True)
    for n in range(1, 8):  # a chain of n multiplications: a new shape each time
        y = x
        for _ in range(n):
            y = y * 1.5
        x.grad = None
        y.sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), np.full(3, 1.5**n), rtol=1e-5)
    assert _fused_compiles() == before


def test_fused_steps_accumulate_into_grad_including_a_grad_set_between_them():
    x = tp.tensor(np.arange(6, dtype=np.float32).reshape(2, 3) - 2.0)
    w = tp.tensor(np.ones((3, 4), np.float32) * 0.5, requires_grad=True)
    xn = x.numpy()
    one = xn.T @ (2.0 * ((xn @ w.numpy()) > 0))  # d/dw sum(2 relu(x w)), by hand
    steps = _fused.FUSE_AFTER + 2  # the last ones run fused
    for _ in range(steps):
        ((x @ w).relu() * 2.0).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), steps * one, rtol=1e-6)
    w.grad = tp.tensor(np.full((3, 4), 10.0, np.float32))
    ((x @ w).relu() * 2.0).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), 10.0 + one, rtol=1e-6)


def _backward(a, b, x):
    a.grad = b.grad = None
    loss = ((a * b) * x).tanh().sum()  # a and b reach their sinks from one node
    loss.item()  # the forward runs first, as on a worker that replied with its output
    loss.backward()


def test_a_recurring_graph_keeps_its_program_when_its_leaves_are_met_in_another_order():
    # A leaf's sink is made when a graph first needs it; one still held by another
    # graph is older than one made now, so the engine meets the same graph's leaves
    # in another order. The fused program's plan must not depend on that order.
    x = tp.tensor(np.linspace(-1.0, 1.0, 5, dtype=np.float32))
    a = tp.tensor(np.full(5, 0.5, np.float32), requires_grad=True)
    b = tp.tensor(np.full(5, 2.0, np.float32), requires_grad=True)
    d = x.numpy() * (1.0 - np.tanh(x.numpy()) ** 2)  # d tanh(a b x) / d(a b), a b = 1
    want_a, want_b = 2.0 * d, 0.5 * d  # by hand
    # the shape recurs: its program is compiled (the forward's segment runs as one
    # program from its FUSE_AFTER-th run, and the backward through that recurs after)
    for _ in range(2 * _fused.FUSE_AFTER):
        _backward(a, b, x)
    before = _fused_compiles()
    held = b * 3.0  # b's sink is now older than a's will be, in the steps below
    held.numpy()  # (its own segment)
    for _ in range(_fused.FUSE_AFTER):
        _backward(a, b, x)
    np.testing.assert_allclose(a.grad.numpy(), want_a, rtol=1e-5)
    np.testing.assert_allclose(b.grad.numpy(), want_b, rtol=1e-5)
    assert _fused_compiles() == before, "the same graph shape compiled a second fused program"
    del held


def test_a_backward_through_a_segment_compiled_at_its_first_run_is_one_program():
    # Shapes no other test uses: the segment's operations are new to this process, so
    # its forward is compiled as one program at once, and its pullbacks are new too.
    x = tp.tensor(np.linspace(-2.0, 2.0, 3 * 11, dtype=np.float32).reshape(3, 11))
    w = tp.tensor(np.full((11, 7), 0.25, np.float32), requires_grad=True)
    y = ((x @ w).sin() * 3.0).sum()
    y.item()  # runs the forward: the backward then starts from computed pullbacks
    counts, fused = trace_counts(), _fused_compiles()
    y.backward()
    after = trace_counts()
    xn = x.numpy()
    want = xn.T @ (3.0 * np.cos(xn @ np.full((11, 7), 0.25, np.float32)))  # by hand
    np.testing.assert_allclose(w.grad.numpy(), want, rtol=1e-5, atol=1e-5)
    assert _fused_compiles() == fused + 1
    assert after.get("<backward>", 0) == counts.get("<backward>", 0), "pullbacks ran one by one"


def test_a_loop_over_a_new_segment_runs_its_first_backward_node_by_node():
    # An episode: the same new step, each run at once (its value is read), then one
    # backward. Its graph repeats one segment's pullbacks: node by node compiles
    # them once, whatever the episode's length; fused, each length would compile.
    w = tp.tensor(np.full((5, 3), 0.1, np.float32), requires_grad=True)
    state = tp.tensor(np.linspace(0.0, 1.0, 2 * 5, dtype=np.float32).reshape(2, 5))
    before = _fused_compiles()
    terms = []
    for _ in range(6):
        p = (state @ w).tanh().sum()
        p.item()  # the step's value is read (an action is sampled from it)
        terms.append(p)
    total = terms[0]
    for t in terms[1:]:
        total = total + t
    total.backward()
    s = state.numpy()
    want = 6.0 * s.T @ (1.0 - np.tanh(s @ np.full((5, 3), 0.1, np.float32)) ** 2)  # by hand
    np.testing.assert_allclose(w.grad.numpy(), want, rtol=1e-5, atol=1e-6)
    assert _fused_compiles() == before


def test_a_recurring_graph_compiles_one_program_whatever_its_accumulator_holds():
    # A distributed autograd context's passes: the first finds nothing held, the
    # second a gradient the context keeps, the later ones a sum it may donate. The
    # whole backward's program must not depend on which: one compilation serves all.
    from tensorplay_jax.autograd._engine import run_backward
    from tensorplay_jax.distributed.autograd._gradients import ContextGradients

    x = tp.tensor(np.linspace(-1.0, 1.0, 4 * 9, dtype=np.float32).reshape(4, 9))
    w = tp.tensor(np.full((9, 5), 0.2, np.float32), requires_grad=True)
    xn = x.numpy()
    one = xn.T @ (1.0 - np.tanh(xn @ np.full((9, 5), 0.2, np.float32)) ** 2)  # by hand
    for _ in range(_fused.FUSE_AFTER):  # the shape recurs: from now on it runs fused
        run_backward([(x @ w).tanh().sum()], accumulate=ContextGradients())
    before = _fused_compiles()
    for _context in range(2):  # two contexts: the second meets the compiled program
        grads = ContextGradients()
        for _ in range(4):  # nothing held, then held, then donated (twice)
            run_backward([(x @ w).tanh().sum()], accumulate=grads)
        np.testing.assert_allclose(np.asarray(grads.hand_out()[w]), 4 * one, rtol=1e-5, atol=1e-6)
    assert _fused_compiles() <= before + 1, (
        "one graph shape compiled a fused backward per accumulator state"
    )
