"""A recurring step recorded through its known pattern (``speedups._replay``): a step that differs
from the last one (a shape, an operation, an input, a value read mid-step) still gets its own
gradient, checked against NumPy by hand or plain ``jax.grad``."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import jax
import jax.monitoring
import jax.numpy as jnp
import numpy as np
import pytest

import tensorplay_jax as tp
from tensorplay_jax.autograd import trace_counts
from tensorplay_jax.autograd.speedups import _pattern
from tensorplay_jax.autograd.speedups._fused import FUSE_AFTER
from tensorplay_jax.autograd.speedups._state import STATE

WARM = FUSE_AFTER + 2  # steps after which a step runs as one program, recorded by replay


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


def _data(rows: int = 6, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal((rows, 5)).astype(np.float32),
        rng.standard_normal((5, 4)).astype(np.float32),
    )


def _relu_grad(xn: np.ndarray, wn: np.ndarray) -> np.ndarray:
    """d/dw sum(relu(x @ w)), by hand in NumPy."""
    return xn.T @ ((xn @ wn) > 0).astype(np.float32)


def _relu_step(x: tp.Tensor, w: tp.Tensor) -> np.ndarray:
    w.grad = None
    (x @ w).relu().sum().backward()
    return w.grad.numpy()


def test_a_new_input_shape_mid_loop_gets_its_own_shape_and_gradient():
    xn, wn = _data()
    x_short = _data(rows=3, seed=4)[0]
    w = tp.tensor(wn, requires_grad=True)
    for step in range(3 * WARM):
        xs = x_short if step == 2 * WARM else xn  # one short batch among recurring ones
        w.grad = None
        h = tp.tensor(xs) @ w
        assert h.shape == (len(xs), 4)  # known before it runs
        h.relu().sum().backward()
        np.testing.assert_allclose(w.grad.numpy(), _relu_grad(xs, wn), rtol=1e-5, atol=1e-6)


def test_a_new_operation_mid_loop_gets_its_own_gradient():
    xn, wn = _data()
    x, w = tp.tensor(xn), tp.tensor(wn, requires_grad=True)
    tanh_grad = jax.grad(lambda w: jnp.tanh(xn @ w).sum())(wn)
    for step in range(3 * WARM):
        w.grad = None
        h = x @ w
        (h.tanh() if step == 2 * WARM else h.relu()).sum().backward()
        expected = tanh_grad if step == 2 * WARM else _relu_grad(xn, wn)
        np.testing.assert_allclose(w.grad.numpy(), expected, rtol=1e-5, atol=1e-6)


def test_a_value_read_mid_step_is_right_and_so_is_the_gradient():
    xn, wn = _data()
    x, w = tp.tensor(xn), tp.tensor(wn, requires_grad=True)
    for step in range(3 * WARM):
        w.grad = None
        h = (x @ w).relu()
        if step == 2 * WARM:  # the recurring segment runs here, before its backward
            np.testing.assert_allclose(h.sum().item(), np.maximum(xn @ wn, 0).sum(), rtol=1e-5)
        h.sum().backward()
        np.testing.assert_allclose(w.grad.numpy(), _relu_grad(xn, wn), rtol=1e-5, atol=1e-6)


def test_the_same_tensor_twice_is_not_taken_for_two_tensors():
    wn, vn = _data(rows=5)[0], _data(rows=5, seed=9)[0]
    w, v = tp.tensor(wn, requires_grad=True), tp.tensor(vn, requires_grad=True)
    for step in range(3 * WARM):
        w.grad = v.grad = None
        other = w if step % 2 else v  # (w * w) and (w * v) alternate
        (w * other).sum().backward()
        np.testing.assert_allclose(w.grad.numpy(), 2 * wn if step % 2 else vn, rtol=1e-6)
        if not step % 2:
            np.testing.assert_allclose(v.grad.numpy(), wn, rtol=1e-6)


def test_an_input_that_starts_to_require_grad_mid_loop_gets_a_gradient():
    xn, wn = _data()
    x, w = tp.tensor(xn), tp.tensor(wn, requires_grad=True)
    for _ in range(WARM):
        _relu_step(x, w)
    x.requires_grad_()
    _relu_step(x, w)
    np.testing.assert_allclose(x.grad.numpy(), ((xn @ wn) > 0) @ wn.T, rtol=1e-5, atol=1e-6)


def test_updated_weights_and_a_new_scalar_each_step_are_used():
    xn, wn = _data()
    x, w = tp.tensor(xn), tp.tensor(wn, requires_grad=True)
    for step in range(3 * WARM):
        scale = 1.0 + step  # a new Python float each step: a new input of the same aval
        w.grad = None
        ((x @ w).relu() * scale).sum().backward()
        np.testing.assert_allclose(w.grad.numpy(), scale * _relu_grad(xn, wn), rtol=1e-5)
        wn = wn - np.float32(0.01) * w.grad.numpy()
        w.data = tp.tensor(wn)  # an optimizer step: the next forward reads the new value


def test_an_intermediate_kept_alive_gets_its_value_and_no_step_compiles(backend_compiles):
    xn, wn = _data()
    x, w = tp.tensor(xn), tp.tensor(wn, requires_grad=True)

    def step() -> tuple[np.ndarray, np.ndarray]:
        w.grad = None
        h = x @ w  # alive through the backward: the program hands its value back
        h.relu().sum().backward()
        return h.numpy(), w.grad.numpy()

    for _ in range(WARM):
        step()
    before = trace_counts()
    del backend_compiles[:]
    for _ in range(3):
        h, g = step()
        np.testing.assert_allclose(h, xn @ wn, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(g, _relu_grad(xn, wn), rtol=1e-5, atol=1e-6)
    assert trace_counts() == before
    assert backend_compiles == []


def test_threads_recording_the_same_step_each_get_their_own_gradient():
    data = [_data(seed=s) for s in (11, 12)]
    grads: dict[int, list[np.ndarray]] = {0: [], 1: []}
    errors: list[BaseException] = []
    start = threading.Barrier(2, timeout=60)

    def run(k: int) -> None:
        try:
            xn, wn = data[k]
            x, w = tp.tensor(xn), tp.tensor(wn, requires_grad=True)
            start.wait()
            for _ in range(2 * WARM):
                grads[k].append(_relu_step(x, w))
        except BaseException as e:  # reported in the test thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads) and errors == []
    for k, (xn, wn) in enumerate(data):
        for g in grads[k]:
            np.testing.assert_allclose(g, _relu_grad(xn, wn), rtol=1e-5, atol=1e-6)


def test_steps_stay_right_across_a_trie_that_starts_afresh(monkeypatch):
    monkeypatch.setattr(_pattern, "MAX_PATTERNS", 4)  # a few new sequences start a new trie
    xn, wn = _data()
    x, w = tp.tensor(xn), tp.tensor(wn, requires_grad=True)
    first_root = _pattern.root(STATE)
    for step in range(3 * WARM):
        w.grad = None
        h = x @ w
        for _ in range(step % 3):  # three step shapes, each a different sequence
            h = h * 1.0
        h.relu().sum().backward()
        np.testing.assert_allclose(w.grad.numpy(), _relu_grad(xn, wn), rtol=1e-5, atol=1e-6)
    assert _pattern.root(STATE) is not first_root
