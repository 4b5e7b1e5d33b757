"""A peer that holds the job secret but breaks the protocol costs a worker nothing for ever.

RRef ids the worker never created (a FORK_ADD, a FORK_DEL, an RRef argument)
leave no record beyond the owner's ``rpc_timeout``, and a call on such an
argument fails with an error naming the id and the sender instead of blocking.
On the same-host socket, descriptors passed with no frame to claim them are
closed, and a shared-memory segment not sealed against shrinking is refused
(its sender could shrink it under the receiver's arrays: SIGBUS). Worker code:
``tests/security/_faulty_peer_workers.py``.
"""

from __future__ import annotations

import json

import pytest

from tensorplay_jax.rpc import _local, _protocol
from tests.security import _faulty_peer_workers as W
from tests.security.test_shutdown_bounds import _env, _one

local_only = pytest.mark.skipif(not _local.available(), reason="needs the same-host transport")
RPC_TIMEOUT_S = 1.5
PROCS_TIMEOUT_S = 60
SECRET = "faulty-peer-secret"


def _peer_env(tmp_path) -> dict[str, str]:
    return {
        "TPJ_TMP": str(tmp_path),
        "TPJ_TRANSPORT": "local",
        "TENSORPLAY_JAX_RPC_SECRET": SECRET,
        "TENSORPLAY_JAX_RPC_LOCAL": "1",
    }


def _result(res, rank: int) -> dict:
    lines = [ln for ln in res[rank].stdout.splitlines() if ln.startswith("RESULT ")]
    assert len(lines) == 1, "\n".join(str(r) for r in res)
    return json.loads(lines[0][len("RESULT ") :])


@pytest.mark.parametrize("transport", ["local", "grpc"])
def test_rref_ids_never_created_are_forgotten_within_rpc_timeout(workers, transport):
    # Before: each id left a placeholder record on w0 for ever (the leak check named them
    # at shutdown), and local_value() on the argument blocked for ever.
    # (w0's shutdown outlasts w1's own waits, so that without the fix both still report.)
    env = _env(transport, TPJ_RPC_TIMEOUT=RPC_TIMEOUT_S, TPJ_SHUTDOWN_TIMEOUT=25)
    res = workers(W.rref_ids_never_created, 2, timeout=PROCS_TIMEOUT_S, check=False, env=env)
    got = _one(res, 1)
    assert got["call"].startswith("RpcTimeoutError"), got
    for s in [f"{W.ARG_ID:#x}", "was never created", "'w0'", "'w1'", "rpc_timeout=1.5 s"]:
        assert s in got["call"], (s, got)
    assert RPC_TIMEOUT_S - 0.5 < got["call_s"] < RPC_TIMEOUT_S + 3, got
    assert got["table"] == {"owned": 0, "parked": 0}, got
    assert got["table_s"] < RPC_TIMEOUT_S + 4, got
    assert got["still_serves"] is True, got
    for rank in (0, 1):
        got = _one(res, rank)
        assert got["error"] is None and got["elapsed"] < 8, got
        assert res[rank].returncode == 0, res[rank]
    err = res[0].stderr
    assert "RRef leak check" not in err, res[0]
    # w0 says what it dropped, and who sent it.
    assert f"RRef {W.ADD_ID:#x} was never created" in err and "FORK_ADD from 'w1'" in err, err
    assert f"release of RRef {W.DEL_ID:#x}" in err and "from 'w1'" in err, err


@local_only
def test_descriptors_no_frame_claims_are_closed(workers, tmp_path):
    # Before: every descriptor passed with a frame that takes none (or with a refused
    # shared-memory frame) stayed open in the victim, with no limit.
    res = workers(W.descriptor_flood, 2, timeout=PROCS_TIMEOUT_S, env=_peer_env(tmp_path))
    victim, peer = _result(res, 0), _result(res, 1)
    print("victim", victim, "peer", peer)
    assert peer["served"] == list(range(1, W.INLINE_CALLS + 1)), peer  # it kept serving
    assert peer["refused"] == W.REFUSED_SEGMENTS + 2, peer  # 20 + the short one + the probe
    assert peer["dropped"] is True, peer  # descriptors mid-frame: that link was dropped
    assert victim["after"] <= victim["before"] + W.FD_SLACK, victim


@local_only
def test_an_unsealed_segment_is_refused(workers, tmp_path):
    # Before: the victim mapped it, the peer shrank it under the victim's array, and the
    # victim died of SIGBUS reading it.
    res = workers(
        W.unsealed_segment, 2, timeout=PROCS_TIMEOUT_S, check=False, env=_peer_env(tmp_path)
    )
    assert res[0].returncode == 0, res[0]
    got = _result(res, 1)
    refused = [_protocol.ERR, 0]  # the error for a malformed message (no message id)
    assert got["unsealed"] == refused and got["unwritten"] == refused, got
    assert got["sealed"] == [_protocol.OK, 3] and got["small"] == [_protocol.OK, 4], got
    err = res[0].stderr
    assert "not sealed against shrinking" in err, err
    assert "fewer bytes written than its buffers" in err, err
