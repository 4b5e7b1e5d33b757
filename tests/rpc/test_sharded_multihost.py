"""A multi-controller array at the RPC boundary: refused, saying what to send instead.

Two processes of one ``jax.distributed`` world (2 virtual CPU devices each) that
are also an RPC job; a global array over all 4 devices has shards in both.
"""

from __future__ import annotations

from tests._procs import free_port, reported, run_workers
from tests.rpc import _sharded_multihost_workers as M


def test_an_array_with_shards_in_another_process_is_refused_with_what_to_send():
    env = {"TPJ_RPC_PORT": str(free_port())}
    res = run_workers(M.send_a_global_array, 2, devices_per_process=2, timeout=120, env=env)
    got = reported(res[0])
    assert "shards are not all in this process" in got["error"], got
    assert (
        "addressable_shards" in got["error"] and "global_array_to_host_local_array" in got["error"]
    )
    assert got["next"] == 3  # nothing was lost on the wire: the next call goes through
