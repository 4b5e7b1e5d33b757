"""Gradients over RPC equal ``jax.grad`` of the same function run locally, for every issue-4 case.

One launch of four workers (w0 drives) checks every case of ``_targets.CASES``
plus the RRef-held parameter: each leaf's gradient against the oracle, no
entry for anything else, ``.grad`` untouched.
"""

from __future__ import annotations

import pytest

from tests.distributed.autograd import _workers as W
from tests.rpc._transports import env_of


@pytest.mark.parametrize("transport", ["grpc", "tcp", "local"])
def test_gradients_match_jax_grad(workers, transport):
    # grpc: real gRPC on loopback; tcp: the TCP link between hosts; local: the same-host
    # Unix-socket/shared-memory transport (tests/rpc/_transports.py).
    env = env_of(transport, JAX_ENABLE_X64="1")
    out = workers(W.cases, 4, timeout=240, env=env)
    printed = out[0].stdout
    from tests.distributed.autograd._targets import CASES as cases

    for case in cases:
        assert f"ok {case.name}" in printed, printed
    assert "ok rref" in printed
