"""Device maps at start-up, over real processes: a bad map fails ``init_rpc`` on every worker.

Apart from ``test_device_maps.py``, whose job is up for the whole module.
"""

from __future__ import annotations

import contextlib

import pytest

from tensorplay_jax import rpc
from tensorplay_jax.testing import WorkerDied, Workers
from tests.rpc import _transports as TR
from tests.rpc._jobs import environ


def test_init_rpc_fails_on_every_worker_for_a_device_the_peer_lacks():
    # Only w0 has a map, so only w1 can see that its cpu:9 is missing: both must fail.
    bad = {"w0": {"device_maps": {"w1": {"cpu:1": "cpu:9"}}}}
    says = "init_rpc: worker 'w0' maps device cpu:1 to cpu:9 on 'w1', but 'w1' has no cpu:9"
    w = Workers(2, names=["w0", "w1"], timeout=30, rpc_options=bad)
    try:
        with environ(TR.env_of("local")), pytest.raises((ValueError, WorkerDied)) as got:
            w.start()
    finally:
        with contextlib.suppress(WorkerDied):
            w.close()
    mine = got.value if isinstance(got.value, ValueError) else got.value.__cause__
    assert isinstance(mine, ValueError) and says in str(mine) and "set_device_map" in str(mine)
    assert says in w.output("w1")
    assert not rpc.is_initialized()
