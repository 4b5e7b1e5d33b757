"""Large arrays: chunked streaming with no size limit, and bounded extra memory."""

from __future__ import annotations

import pytest

from tests.rpc import _transports as T
from tests.rpc import _workers as W


@pytest.mark.slow
@pytest.mark.parametrize("transport", T.NAMES)
def test_one_gib_round_trip(workers, transport):
    env = T.env_of(transport, TPJ_MIB="1024")
    res = workers(W.large, 2, timeout=280, env=env)
    assert "LARGE-OK" in res[0].stdout, res[0]
