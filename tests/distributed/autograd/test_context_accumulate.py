"""A distributed autograd context sums micro-batch gradients in the compiled backward.

The context is an ``Accumulator``: a fused backward takes what the context holds for
each leaf, returns the sum, and writes it into the buffer of a sum the context made
and has not handed out (donated). These tests run the local tape into a context as
distributed autograd does (``retain_graph=True``); the oracle is ``jax.grad`` of the
same MLP written in ``jax.numpy`` over the whole batch.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tensorplay_jax as tp
from tensorplay_jax import nn
from tensorplay_jax.autograd import run_backward
from tensorplay_jax.distributed.autograd import _context

_ids = itertools.count(7_000_001)
BATCH, D_IN, D_HID, SPLITS = 64, 24, 40, 8


def _mlp() -> nn.Sequential:
    tp.manual_seed(3)
    return nn.Sequential(nn.Linear(D_IN, D_HID), nn.ReLU(), nn.Linear(D_HID, D_IN))


def _batch() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((BATCH, D_IN)).astype(np.float32)
    ct = rng.standard_normal((BATCH, D_IN)).astype(np.float32)
    return x, ct


def _oracle(seq: nn.Sequential, x: np.ndarray, ct: np.ndarray) -> list[np.ndarray]:
    """d(sum(mlp(x) * ct)) / d(w1, b1, w2, b2) with jax.grad over the whole batch."""
    params = [jnp.asarray(p.detach().numpy()) for p in seq.parameters()]

    def loss(w1: jax.Array, b1: jax.Array, w2: jax.Array, b2: jax.Array) -> jax.Array:
        h = jnp.maximum(x @ w1.T + b1, 0.0)
        return jnp.sum((h @ w2.T + b2) * ct)

    return [np.asarray(g) for g in jax.grad(loss, argnums=(0, 1, 2, 3))(*params)]


def _micro_batches(seq: nn.Sequential, ctx: _context.DistAutogradContext, x, ct) -> None:
    for xs, cs in zip(np.split(x, SPLITS), np.split(ct, SPLITS), strict=True):
        run_backward([seq(tp.tensor(xs))], [cs], retain_graph=True, accumulate=ctx.accumulate)


@pytest.mark.parametrize("steps", [1, 4])
def test_micro_batch_gradients_sum_in_the_context_to_the_whole_batch_gradient(steps: int) -> None:
    seq, (x, ct) = _mlp(), _batch()
    want = _oracle(seq, x, ct)
    for _ in range(steps):  # the later steps run fused, summing in the program
        ctx = _context.DistAutogradContext(next(_ids))
        _micro_batches(seq, ctx, x, ct)
        got = ctx.gradient_arrays()
        for p, w in zip(seq.parameters(), want, strict=True):
            np.testing.assert_allclose(np.asarray(got[p]), w, rtol=2e-5, atol=2e-5)


def test_the_next_micro_batch_sums_into_the_buffer_of_the_contexts_own_sum() -> None:
    seq, (x, ct) = _mlp(), _batch()
    for _ in range(3):  # warm up: the backward's shape runs fused from here on
        _micro_batches(seq, _context.DistAutogradContext(next(_ids)), x, ct)
    ctx = _context.DistAutogradContext(next(_ids))
    w = next(iter(seq.parameters()))
    sums = []
    for xs, cs in zip(np.split(x, SPLITS), np.split(ct, SPLITS), strict=True):
        run_backward([seq(tp.tensor(xs))], [cs], retain_graph=True, accumulate=ctx.accumulate)
        sums.append(ctx.accumulate._grads[w])
    # the first gradient is stored as it came (never reused); each sum after the first
    # takes the buffer of the one before
    assert [s.is_deleted() for s in sums] == [False] + [True] * (SPLITS - 2) + [False]


def test_gradients_handed_out_keep_their_values_while_the_context_accumulates() -> None:
    seq, (x, ct) = _mlp(), _batch()
    for _ in range(3):
        _micro_batches(seq, _context.DistAutogradContext(next(_ids)), x, ct)
    ctx = _context.DistAutogradContext(next(_ids))
    _micro_batches(seq, ctx, x, ct)
    handed = ctx.gradient_arrays()
    copies = {p: np.array(g) for p, g in handed.items()}
    _micro_batches(seq, ctx, x, ct)  # a second pass of the same context
    _micro_batches(seq, ctx, x, ct)
    for p, g in handed.items():
        assert not g.is_deleted()
        np.testing.assert_array_equal(np.asarray(g), copies[p])
    for p, g in ctx.gradient_arrays().items():
        np.testing.assert_allclose(np.asarray(g), 3 * copies[p], rtol=2e-5, atol=2e-5)


def test_an_array_given_to_accumulate_is_never_reused_for_a_sum() -> None:
    ctx = _context.DistAutogradContext(next(_ids))
    w = tp.zeros(300, 500, requires_grad=True)  # large enough for a compiled sum
    given = [jnp.full((300, 500), float(i)) for i in range(1, 5)]
    for g in given:
        ctx.accumulate(w, g)
    assert not any(g.is_deleted() for g in given)
    np.testing.assert_array_equal(np.asarray(ctx.gradient_arrays()[w]), np.full((300, 500), 10.0))
