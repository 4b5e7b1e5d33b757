"""Inputs of the DDP tests, shared by the workers (``_ddp_workers``) and the oracle (``test_ddp``).

Every rank's batch is drawn from a seed of its own, so the test process can rebuild
all of them and compute the expected gradients with ``jax.grad`` over the
concatenated batch.
"""

from __future__ import annotations

import numpy as np

D_IN, D_HID, D_OUT, BATCH = 5, 16, 3, 4
LR = 0.1  # the join test's SGD step
BIG, BIG_BATCH = 1024, 128  # the overlap model: layers of BIG x BIG (4 MiB in float32)


def batch(rank: int, step: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Rank ``rank``'s inputs and targets at ``step``."""
    rs = np.random.RandomState(1000 * step + rank)
    x = rs.randn(BATCH, D_IN).astype(np.float32)
    y = rs.randn(BATCH, D_OUT).astype(np.float32)
    return x, y


def uneven_steps(rank: int) -> int:
    """How many batches rank ``rank`` has in the join test (rank r: r + 1)."""
    return rank + 1
