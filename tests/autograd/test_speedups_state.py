"""The speed-up layer's state: one object, bounded tables, ``clear()``."""

from __future__ import annotations

import numpy as np

import tensorplay_jax as tp
from tensorplay_jax.autograd import _cache, speedups
from tensorplay_jax.autograd.speedups import _pattern
from tensorplay_jax.autograd.speedups._fused import FUSE_AFTER
from tensorplay_jax.autograd.speedups._state import STATE, Bounded, LayerState


def test_a_bounded_table_forgets_its_oldest_entries() -> None:
    table: Bounded[int, str] = Bounded(3)
    for k in range(5):
        table.put(k, str(k))
    assert list(table) == [2, 3, 4]
    table.hit(2, "again")  # a recently used entry becomes the newest
    table.put(5, "5")
    assert list(table) == [4, 2, 5]
    assert table.put(5, "other") == "5"  # put keeps what is there


def test_every_table_of_the_layer_is_bounded() -> None:
    state = LayerState()
    unbounded = [
        name
        for name, value in vars(state).items()
        if isinstance(value, dict | set) and not isinstance(value, Bounded)
    ]
    # ``assigned`` holds one entry per live Tensor given a pending value (each removed
    # by a weak reference's callback when its Tensor dies): bounded by what is alive.
    assert unbounded == ["assigned"]


def test_the_core_caches_are_bounded() -> None:
    before = len(_cache.CACHE.ones)
    for n in range(1, _cache.MAX_ONES + 10):
        _cache.ones_like(np.zeros((n,), np.float32))
    assert len(_cache.CACHE.ones) <= _cache.MAX_ONES
    assert before <= _cache.MAX_ONES


def test_clear_forgets_patterns_and_kept_backwards() -> None:
    w = tp.ones(3, requires_grad=True)
    for _ in range(FUSE_AFTER + 1):
        w.grad = None
        (w * 2.0).sum().backward()
    assert len(STATE.known) > 0
    root = _pattern.root(STATE)
    speedups.clear()
    assert len(STATE.known) == 0 and len(STATE.seen_shapes) == 0
    assert _pattern.root(STATE) is not root
    for _ in range(FUSE_AFTER + 1):  # and it learns them again
        w.grad = None
        (w * 2.0).sum().backward()
        np.testing.assert_array_equal(w.grad.numpy(), [2.0, 2.0, 2.0])
    assert len(STATE.known) > 0


def test_a_known_backward_hands_values_to_the_intermediates_still_held() -> None:
    rng = np.random.default_rng(8)
    xn = rng.standard_normal((5, 4)).astype(np.float32)
    wn = rng.standard_normal((4, 3)).astype(np.float32)
    x, w = tp.tensor(xn), tp.tensor(wn, requires_grad=True)
    for _ in range(FUSE_AFTER + 3):  # the later steps run as one known program
        w.grad = None
        h = x @ w  # held here, and saved by relu's node
        loss = h.relu().sum()  # relu's output is saved by no one: dropped
        loss.backward()
        np.testing.assert_allclose(h.numpy(), xn @ wn, rtol=1e-6)
        np.testing.assert_allclose(loss.item(), np.maximum(xn @ wn, 0).sum(), rtol=1e-5)
        np.testing.assert_allclose(w.grad.numpy(), xn.T @ (xn @ wn > 0), rtol=1e-5)
