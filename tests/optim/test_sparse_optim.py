"""Optimizers stepping sparse gradients: only the touched rows move, with torch's numbers.

The expected tables are torch 2.13's for the same run (written out): an
``Embedding(5, 3, sparse=True)`` starting at ``arange(15).reshape(5, 3) / 10``, three
batches ``[1, 3, 1]``, ``[0, 1]``, ``[4, 4, 4, 2]``, each loss ``sum(out * arange)``.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay_jax as tp
from tensorplay_jax import optim

W = np.arange(15, dtype=np.float32).reshape(5, 3) / 10
BATCHES = ([1, 3, 1], [0, 1], [4, 4, 4, 2])

SGD_WANT = [
    [0.0, -0.4, -0.8], [-4.2, -5.6, -7.0], [-3.9, -4.3, -4.7], [-0.6, -1.0, -1.4],
    [-3.3, -4.7, -6.1],
]  # fmt: skip
ADAM_WANT = [
    [0.0, 0.02559, 0.12559], [0.10678, 0.20678, 0.30678], [0.53612, 0.63612, 0.73612],
    [0.8, 0.9, 1.0], [1.13612, 1.23612, 1.33612],
]  # fmt: skip
ADAM_MAX_WANT = [
    [0.0, 0.17658, 0.27658], [0.49283, 0.59283, 0.69283], [0.66747, 0.76747, 0.86747],
    [1.0, 1.1, 1.2], [1.26747, 1.36747, 1.46747],
]  # fmt: skip


def _emb() -> tp.nn.Embedding:
    e = tp.nn.Embedding(5, 3, sparse=True)
    e.weight.data = tp.tensor(W.copy())
    return e


def _train(e: tp.nn.Embedding, opt: optim.Optimizer, batches=BATCHES) -> None:
    for batch in batches:
        opt.zero_grad()
        out = e(tp.tensor(batch))
        (out * tp.arange(len(batch) * 3.0).reshape(-1, 3)).sum().backward()
        assert e.weight.grad.is_sparse
        opt.step()


@pytest.mark.parametrize(
    "make,want",
    [
        (lambda p: optim.SGD(p, lr=0.5), SGD_WANT),
        (lambda p: optim.SparseAdam(p, lr=0.1), ADAM_WANT),
        (lambda p: optim.SparseAdam(p, lr=0.1, betas=(0.8, 0.9), maximize=True), ADAM_MAX_WANT),
    ],
    ids=["sgd", "sparse_adam", "sparse_adam_maximize"],
)
def test_steps_match_torch(make, want) -> None:
    e = _emb()
    _train(e, make(e.parameters()))
    np.testing.assert_allclose(e.weight.numpy(), want, rtol=1e-4, atol=1e-5)


def test_untouched_rows_and_their_moments_stay_as_they_were() -> None:
    e = _emb()
    opt = optim.SparseAdam(e.parameters(), lr=0.1)
    _train(e, opt, ([1, 3],))
    untouched = [0, 2, 4]
    np.testing.assert_array_equal(e.weight.numpy()[untouched], W[untouched])
    state = opt.state[e.weight]
    assert float(state["step"]) == 1.0
    np.testing.assert_array_equal(state["exp_avg"].numpy()[untouched], 0.0)
    # (1 - beta1) * gradient on the touched rows: the cotangent rows [0, 1, 2], [3, 4, 5]
    np.testing.assert_allclose(
        state["exp_avg"].numpy()[[1, 3]], [[0, 0.1, 0.2], [0.3, 0.4, 0.5]], rtol=1e-5
    )


def test_step_updates_the_table_in_its_own_buffer() -> None:
    e = _emb()
    opt = optim.SGD(e.parameters(), lr=0.5)
    view = e.weight.detach()
    before = e.weight.value
    _train(e, opt, ([1],))
    assert before.is_deleted()  # donated: XLA wrote the rows where they were
    np.testing.assert_allclose(view.numpy(), e.weight.numpy())  # a view sees the new rows


def test_sparse_adam_refuses_a_dense_gradient() -> None:
    w = tp.nn.Parameter(tp.ones(3))
    opt = optim.SparseAdam([w], lr=0.1)
    (w * 2).sum().backward()
    with pytest.raises(RuntimeError, match="SparseAdam does not support dense gradients"):
        opt.step()


def test_adam_refuses_a_sparse_gradient() -> None:
    e = _emb()
    opt = optim.Adam(e.parameters(), lr=0.1)
    e(tp.tensor([1])).sum().backward()
    with pytest.raises(RuntimeError, match="Adam does not support sparse gradients"):
        opt.step()


def test_sgd_with_momentum_refuses_a_sparse_gradient() -> None:
    e = _emb()
    opt = optim.SGD(e.parameters(), lr=0.1, momentum=0.9)
    e(tp.tensor([1])).sum().backward()
    with pytest.raises(NotImplementedError, match="without momentum and weight_decay"):
        opt.step()


def test_a_row_touched_before_stays_put_when_a_later_step_misses_it() -> None:
    e = _emb()
    opt = optim.SparseAdam(e.parameters(), lr=0.1)
    _train(e, opt, ([4],))
    row, moment = e.weight.numpy()[4].copy(), opt.state[e.weight]["exp_avg"].numpy()[4].copy()
    _train(e, opt, ([1],))  # the last row is where a padded step would clamp to
    np.testing.assert_array_equal(e.weight.numpy()[4], row)
    np.testing.assert_array_equal(opt.state[e.weight]["exp_avg"].numpy()[4], moment)


def _sparse_grad(rows: list[int]) -> tp.Tensor:
    e = _emb()
    out = e(tp.tensor(rows))
    out.sum().backward()
    return e.weight.grad


def test_the_distributed_step_updates_a_table_in_its_own_buffer() -> None:
    # DistributedOptimizer's step is apply_gradients(stale_check=False) on the owner
    e = _emb()
    before = e.weight.value
    optim.SGD(e.parameters(), lr=0.5).apply_gradients(
        {e.weight: _sparse_grad([1, 1])}, stale_check=False
    )
    assert before.is_deleted()  # donated: no copy of the table
    want = W.copy()
    want[1] -= 0.5 * 2
    np.testing.assert_allclose(e.weight.numpy(), want)


def test_a_lookup_recorded_before_a_distributed_step_still_runs_backward() -> None:
    e = _emb()
    out = e(tp.tensor([2, 4]))  # another trainer's forward, before the step
    optim.SGD(e.parameters(), lr=0.5).apply_gradients(
        {e.weight: _sparse_grad([1])}, stale_check=False
    )
    out.sum().backward()
    got = e.weight.grad.to_dense().numpy()
    want = np.zeros_like(W)
    want[[2, 4]] = 1.0
    np.testing.assert_allclose(got, want)


def test_a_dense_use_recorded_before_a_distributed_step_refuses_its_backward() -> None:
    e = _emb()
    loss = (e.weight * e.weight).sum()  # saves the table itself
    optim.SGD(e.parameters(), lr=0.5).apply_gradients(
        {e.weight: _sparse_grad([1])}, stale_check=False
    )
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()
