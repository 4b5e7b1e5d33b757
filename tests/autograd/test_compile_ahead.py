"""A backward announced by ``expect_backward`` is compiled ahead, then run without compiling.

``speedups._ahead`` compiles the fused backward of a new graph on a background
thread as soon as distributed autograd sends the Tensors it starts from; the
backward, when it comes, waits for that compilation and finds the program in
JAX's caches. Here in one process: the announcement, then ``run_backward`` from
the same edge, against ``jax.grad`` of the same function.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tensorplay_jax as tp
from tensorplay_jax.autograd import (
    expect_backward,
    get_gradient_edge,
    run_backward,
    speedups,
    trace_counts,
)
from tensorplay_jax.autograd.speedups._ahead import AHEAD, Ahead

RNG = np.random.default_rng(5)
X = RNG.standard_normal((5, 13)).astype(np.float32)  # shapes no other test uses
W = (0.3 * RNG.standard_normal((13, 7))).astype(np.float32)
CT = RNG.standard_normal((5, 7)).astype(np.float32)


def _oracle() -> np.ndarray:
    return np.asarray(jax.grad(lambda w: jnp.sum(3.0 * jnp.tanh(X @ w) * CT))(W))


def _graph() -> tuple[tp.Tensor, tp.Tensor]:
    w = tp.tensor(W, requires_grad=True)
    return w, (tp.tensor(X) @ w).tanh() * 3.0


def _backward(y: tp.Tensor) -> dict:
    grads: dict = {}
    run_backward([get_gradient_edge(y)], [CT], accumulate=lambda t, g: grads.__setitem__(t, g))
    return grads


def test_an_announced_new_backward_is_compiled_once_ahead_and_gives_jax_grads_gradient():
    speedups.clear()  # every operation is new: the graph's first backward is fused
    w, y = _graph()
    started, traced = AHEAD.started, trace_counts().get("<fused backward>", 0)
    _announce(y)
    assert AHEAD.started == started + 1
    grads = _backward(y)
    np.testing.assert_allclose(np.asarray(grads[w]), _oracle(), rtol=1e-5, atol=1e-6)
    assert trace_counts().get("<fused backward>", 0) == traced + 1, "traced ahead only"


def _announce(y: tp.Tensor) -> None:
    expect_backward([get_gradient_edge(y)], [jax.ShapeDtypeStruct(CT.shape, CT.dtype)])


def test_a_backward_of_a_graph_seen_before_is_not_compiled_ahead():
    speedups.clear()
    y = _graph()[1]
    _announce(y)
    _backward(y)  # the first backward of the shape takes its segments' freshness
    w, y = _graph()
    started = AHEAD.started
    _announce(y)
    assert AHEAD.started == started
    np.testing.assert_allclose(np.asarray(_backward(y)[w]), _oracle(), rtol=1e-5, atol=1e-6)


def test_without_the_speed_up_layer_an_announcement_does_nothing():
    old = tp.autograd.set_deferred(False)
    try:
        w, y = _graph()
        started = AHEAD.started
        _announce(y)
        assert AHEAD.started == started
        np.testing.assert_allclose(np.asarray(_backward(y)[w]), _oracle(), rtol=1e-5, atol=1e-6)
    finally:
        tp.autograd.set_deferred(old)


def test_a_failed_compilation_ahead_is_dropped_and_its_key_can_be_submitted_again():
    ahead = Ahead(limit=2)

    def fail() -> None:
        raise ValueError("no such program")

    assert ahead.submit("k", fail)
    ahead.wait("k")  # logged, not raised: the call compiles the program itself
    assert ahead.submit("k", lambda: 1)
    ahead.wait("k")


def test_submissions_beyond_the_limit_are_refused_while_all_still_compile():
    import threading

    gate = threading.Event()
    ahead = Ahead(limit=1)
    try:
        assert ahead.submit("a", lambda: gate.wait(10))
        assert not ahead.submit("b", lambda: None)
    finally:
        gate.set()
    ahead.wait("a")
    assert ahead.submit("b", lambda: None)
    ahead.wait("b")


@pytest.mark.parametrize("key", ["never-submitted"])
def test_waiting_for_a_key_never_submitted_returns_at_once(key):
    Ahead().wait(key)
