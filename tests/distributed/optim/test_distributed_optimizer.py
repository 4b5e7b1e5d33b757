"""DistributedOptimizer across three worker processes: parity with optax, errors, concurrency."""

from __future__ import annotations

from tests.distributed.optim import _workers as W


def test_distributed_optimizer(workers):
    res = workers(W.optimizer, 3, timeout=240)
    assert "OPTIMIZER_OK" in res[0].stdout, res[0]
