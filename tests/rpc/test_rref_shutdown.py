"""The leak check: a user that leaves without a shutdown, holding an RRef, is named by
the owner when it shuts down (the test process, ``w0``).

Users that shut down gracefully release theirs: ``test_init.py`` (``late_job``).
"""

from __future__ import annotations

import gc
import warnings

from tensorplay_jax import rpc
from tests._worker import wait_until
from tests.rpc import _targets as T
from tests.rpc import _workers as W
from tests.rpc._jobs import Peers

LEAK = "RRef leak check"


def _shutdown_warnings() -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rpc.shutdown()
    return [str(w.message) for w in caught]


def test_a_user_that_leaves_without_shutdown_is_reported_by_the_owner():
    with Peers(W.leaving_peer, 2) as peers:
        rpc.init_rpc("w0", rank=0, world_size=2, rpc_backend_options=peers.options())
        try:
            rpc.rpc_sync("w1", T.keep, args=(rpc.remote("w0", T.make_tracked, args=(5,)),))
            gc.collect()
            rpc.rpc_sync("w1", T.leave_soon)  # w1 leaves holding it, without a graceful shutdown
            wait_until(lambda: rpc.rpc_async("w1", T.add, args=(1, 1)).exception() is not None)
        finally:
            mine = _shutdown_warnings()
    leaks = [w for w in mine if LEAK in w]
    assert len(leaks) == 1 and "'w0' still owns 1 value" in leaks[0], mine
