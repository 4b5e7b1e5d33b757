"""What test_tcp sends and runs on its workers, which reach each other as other hosts do.

The job runs with the same-host transport off (``TENSORPLAY_JAX_RPC_LOCAL=0``), so
the pairs talk over ``rpc/_tcp`` on loopback.
"""

from __future__ import annotations

import os
import signal
import threading

import jax.numpy as jnp
import numpy as np

N = (1 << 20) + 13  # elements: longer than a link's read buffer, not a whole number of pages


def arrays(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    normal = rng.standard_normal(N)
    return [
        normal.astype(np.float32),
        normal,  # float64
        rng.integers(-128, 128, N, dtype=np.int8),
        rng.integers(0, 1 << 16, (N // 7, 7), dtype=np.uint16),
        rng.random(N) < 0.5,
        (normal + 1j * rng.standard_normal(N)).astype(np.complex64),
        np.asarray(jnp.asarray(normal, dtype=jnp.bfloat16)),
        np.array([np.nan, -0.0, np.inf], dtype=np.float64),  # a small one among them
    ]


def reply_then_die(mib: int) -> np.ndarray:
    """A reply of ``mib`` MiB; this process is killed while it is being sent."""
    x = np.ones(mib << 18, dtype=np.float32)
    threading.Timer(0.05, os.kill, args=(os.getpid(), signal.SIGKILL)).start()
    return x
