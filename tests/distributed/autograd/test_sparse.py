"""Sparse tensors through RPC and distributed autograd, between real worker processes.

This process is ``w0``; ``w1`` runs the targets of ``_sparse_targets``. The expected
gradients are torch's (written out): the gradient of ``sparse.sum(a + b)`` for each
sparse input is sparse, on its pattern, ones; over two passes of one context, twos.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay_jax as tp
import tensorplay_jax.distributed.autograd as dist_autograd
from tensorplay_jax import optim
from tensorplay_jax.distributed import rpc
from tensorplay_jax.distributed.optim import DistributedOptimizer
from tensorplay_jax.testing import Workers
from tests.distributed.autograd import _sparse_targets as T

PATTERN = np.array([[0, 0, 1], [1, 0, 1], [0, 0, 0]], np.float32)


@pytest.fixture(scope="module")
def job():
    workers = Workers(2, names=["w0", "w1"], timeout=90)
    try:
        yield workers.start()
    finally:
        workers.close()


def test_sparse_result_comes_back_sparse(job) -> None:
    out = rpc.rpc_sync("w1", T.add, args=(T.build_sparse(False), T.build_sparse(False)))
    assert out.is_sparse and out.shape == (3, 3)
    np.testing.assert_allclose(out.to_dense().numpy(), 2 * T.build_sparse().to_dense().numpy())


def test_gradient_of_sparse_arguments_is_sparse(job) -> None:
    a, b = T.build_sparse(), T.build_sparse()
    with dist_autograd.context() as cid:
        loss = tp.sparse.sum(rpc.rpc_sync("w1", T.add, args=(a, b)))
        dist_autograd.backward(cid, [loss])
        grads = dist_autograd.get_gradients(cid)
    for t in (a, b):
        assert grads[t].is_sparse
        np.testing.assert_allclose(grads[t].to_dense().numpy(), PATTERN)
    assert a.grad is None and b.grad is None


def test_sparse_gradients_sum_per_context_and_stay_sparse(job) -> None:
    a = T.build_sparse()
    with dist_autograd.context() as cid:
        loss = tp.sparse.sum(rpc.rpc_sync("w1", T.scaled, args=(a, 3.0)))
        dist_autograd.backward(cid, [loss], retain_graph=True)
        dist_autograd.backward(cid, [loss])
        g = dist_autograd.get_gradients(cid)[a]
    assert g.is_sparse
    np.testing.assert_allclose(g.to_dense().numpy(), 6 * PATTERN)


def test_remote_sparse_leaf_gets_a_sparse_gradient_on_its_owner(job) -> None:
    rref = rpc.remote("w1", T.make_kept)
    b = T.build_sparse()
    with dist_autograd.context() as cid:
        out = rpc.rpc_sync("w1", T.use_rref, args=(rref, b))
        dist_autograd.backward(cid, [tp.sparse.sum(out * 2)])
        owner = rpc.rpc_sync("w1", T.kept_gradient, args=(cid,))
        mine = dist_autograd.get_gradients(cid)[b]
    assert owner.is_sparse and mine.is_sparse
    np.testing.assert_allclose(owner.to_dense().numpy(), 2 * PATTERN)
    np.testing.assert_allclose(mine.to_dense().numpy(), 2 * PATTERN)


def test_distributed_sgd_steps_the_rows_of_a_remote_sparse_table(job) -> None:
    weight = rpc.remote("w1", T.make_embedding)
    opt = DistributedOptimizer(optim.SGD, [weight], lr=0.5)
    with dist_autograd.context() as cid:
        out = rpc.rpc_sync("w1", T.lookup, args=(tp.tensor([1, 3, 1]),))
        dist_autograd.backward(cid, [(out * tp.arange(9.0).reshape(3, 3)).sum()])
        grad = rpc.rpc_sync("w1", T.table_gradient, args=(cid,))
        opt.step(cid)
    assert grad.is_sparse and grad._indices().tolist() == [[1, 3, 1]]
    # torch: row 1 gets both looked-up cotangent rows, row 3 one, the others nothing
    want = np.arange(15, dtype=np.float32).reshape(5, 3) / 10
    want[1] -= 0.5 * np.array([6.0, 8.0, 10.0])
    want[3] -= 0.5 * np.array([3.0, 4.0, 5.0])
    np.testing.assert_allclose(rpc.rpc_sync("w1", T.table).numpy(), want, rtol=1e-6)
