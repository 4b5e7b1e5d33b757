"""Local gradient accumulation into ``.grad`` across micro-batches (``autograd._accumulate``).

The fused backward sums each leaf's new gradient with ``leaf.grad`` in its own compiled
call and returns only that sum; ``accumulate_into_grad.put`` stores it, or, when another
pass replaced ``leaf.grad`` meanwhile, adds the gradient to the new value. The oracle is
``jax.grad`` of the same MLP in ``jax.numpy`` over the whole batch.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tensorplay_jax as tp
from tensorplay_jax import nn
from tensorplay_jax.autograd import accumulate_into_grad

BATCH, D_IN, D_HID, SPLITS = 48, 20, 36, 6


def _mlp() -> nn.Sequential:
    tp.manual_seed(11)
    return nn.Sequential(nn.Linear(D_IN, D_HID), nn.Tanh(), nn.Linear(D_HID, D_IN))


def _batch() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(12)
    return (
        rng.standard_normal((BATCH, D_IN)).astype(np.float32),
        rng.standard_normal((BATCH, D_IN)).astype(np.float32),
    )


def _oracle(seq: nn.Sequential, x: np.ndarray, ct: np.ndarray) -> list[np.ndarray]:
    params = [jnp.asarray(p.detach().numpy()) for p in seq.parameters()]

    def loss(w1: jax.Array, b1: jax.Array, w2: jax.Array, b2: jax.Array) -> jax.Array:
        return jnp.sum((jnp.tanh(x @ w1.T + b1) @ w2.T + b2) * ct)

    return [np.asarray(g) for g in jax.grad(loss, argnums=(0, 1, 2, 3))(*params)]


def _accumulate(seq: nn.Sequential, x: np.ndarray, ct: np.ndarray) -> None:
    for p in seq.parameters():
        p.grad = None
    for xs, cs in zip(np.split(x, SPLITS), np.split(ct, SPLITS), strict=True):
        seq(tp.tensor(xs)).backward(tp.tensor(cs))


@pytest.mark.parametrize("steps", [1, 5])
def test_micro_batches_accumulate_into_grad_to_the_whole_batch_gradient(steps: int) -> None:
    seq, (x, ct) = _mlp(), _batch()
    want = _oracle(seq, x, ct)
    for _ in range(steps):  # the later steps run fused, summing with .grad in the program
        _accumulate(seq, x, ct)
    for p, w in zip(seq.parameters(), want, strict=True):
        np.testing.assert_allclose(p.grad.numpy(), w, rtol=2e-5, atol=2e-5)


def test_a_grad_the_user_holds_keeps_its_value_while_later_micro_batches_accumulate() -> None:
    seq, (x, ct) = _mlp(), _batch()
    for _ in range(4):
        _accumulate(seq, x, ct)
    w = next(iter(seq.parameters()))
    w.grad = None
    seq(tp.tensor(x[:8])).backward(tp.tensor(ct[:8]))
    held = w.grad
    copy = held.numpy().copy()
    for _ in range(3):
        seq(tp.tensor(x[:8])).backward(tp.tensor(ct[:8]))
    np.testing.assert_array_equal(held.numpy(), copy)
    np.testing.assert_allclose(w.grad.numpy(), 4 * copy, rtol=2e-5, atol=2e-5)


def test_a_sum_put_after_grad_was_replaced_adds_the_gradient_to_the_new_value() -> None:
    leaf = tp.zeros(3, requires_grad=True)
    leaf.grad = tp.tensor([1.0, 2.0, 3.0])
    held, donated = accumulate_into_grad.take(leaf)
    assert donated is False and held is leaf.grad.value
    grad = jnp.asarray([10.0, 20.0, 30.0])
    leaf.grad = tp.tensor([100.0, 200.0, 300.0])  # another pass stored a value meanwhile
    accumulate_into_grad.put(leaf, held, donated, None, held + grad)  # only the sum came back
    np.testing.assert_allclose(leaf.grad.numpy(), [110.0, 220.0, 330.0])
