"""Large arrays: chunked streaming with no size limit, and bounded extra memory."""

from __future__ import annotations

import pytest

from tests.rpc import _workers as W


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["local", "grpc"])
def test_one_gib_round_trip(workers, transport):
    env = {"TPJ_MIB": "1024", "TENSORPLAY_JAX_RPC_LOCAL": "1" if transport == "local" else "0"}
    res = workers(W.large, 2, timeout=280, env=env)
    assert "LARGE-OK" in res[0].stdout, res[0]
