"""Sharded arrays over the TCP link: a round trip and the memory bounds (``test_sharded.py``)."""

from __future__ import annotations

import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from tensorplay_jax import rpc
from tests.rpc import _sharded_targets as S
from tests.rpc._jobs import rpc_job
from tests.rpc.test_sharded import (
    MAPS,
    mapped,
    mesh,
    sharded,
    test_the_receiver_holds_the_shards_and_no_gathered_copy,  # noqa: F401
    test_the_sender_makes_no_gathered_copy,  # noqa: F401
    values,
)


@pytest.fixture(scope="module")
def job():
    with rpc_job(2, "tcp", rpc_options=MAPS) as w:
        yield w


def test_a_round_trip_over_tcp(job):
    m = mesh(2, 2, axes=("a", "b"))
    x = sharded(values((4, 4), np.float32), m, P("a", "b"))
    assert rpc.rpc_sync("w1", S.layout, args=(x,))["devices"] == mapped(m)
    back = rpc.rpc_sync("w1", S.double, args=(x,))
    assert back.sharding == x.sharding
    np.testing.assert_array_equal(np.asarray(back), 2 * values((4, 4), np.float32))
