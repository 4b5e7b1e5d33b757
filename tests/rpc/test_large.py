"""Large arrays: chunked streaming with no size limit, and bounded extra memory.

``MIB`` is a size just above every size threshold of the transports:
the same-host segment pool (``_local/segments.py``: 512 MiB), the TCP link's
mapping pool (``_tcp.py``: 256 MiB) and step (4 MiB), gRPC's chunks (4 MiB); a
larger array takes no other path. ``w0`` is the test process.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from tensorplay_jax import rpc
from tests.rpc import _targets as T
from tests.rpc import _transports as TR
from tests.rpc._jobs import rpc_job

MIB = 520
JAX_MIB = 64


@pytest.mark.slow
@pytest.mark.parametrize("transport", TR.NAMES)
def test_large_round_trip_is_exact_and_bounded_in_memory(transport):
    x = np.resize(np.arange(251, dtype=np.uint8), MIB << 20)
    with rpc_job(2, transport, timeout=280):
        base = rpc.rpc_sync("w1", T.maxrss_mib)
        y = rpc.rpc_sync("w1", T.identity, args=(x,), timeout=0)
        peak = rpc.rpc_sync("w1", T.maxrss_mib)
        assert y.shape == x.shape and y.dtype == x.dtype and np.array_equal(x, y)
        del y
        # the callee held one received copy; allow about 2x the payload over its baseline
        assert peak - base <= 2.2 * MIB, (base, peak)
        z = rpc.rpc_sync("w1", T.identity, args=(jnp.asarray(x[: JAX_MIB << 20]),), timeout=0)
        assert isinstance(z, type(jnp.asarray(x[:1])))
        assert int(z[-1]) == int(x[(JAX_MIB << 20) - 1])
