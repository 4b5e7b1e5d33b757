"""Timeouts and a killed peer over real processes, on each transport.

One job of three workers per transport (``w0`` is the test process; the job's RPC
timeout is 1.5 s); the last test kills ``w2``. The job secret, malformed packets
and TLS are in ``test_wire_security.py``.
"""

from __future__ import annotations

import time

import pytest

from tensorplay_jax import rpc
from tests._worker import expect
from tests.rpc import _targets as T
from tests.rpc import _transports as TR
from tests.rpc._jobs import rpc_job

RPC_TIMEOUT_S = 1.5


@pytest.fixture(scope="module", params=TR.NAMES)
def job(request):
    with rpc_job(3, request.param, timeout=RPC_TIMEOUT_S) as w:
        yield w


def test_a_call_past_its_timeout_fails_naming_the_peer_and_function(job):
    t = time.monotonic()
    says = ["RPC ran for more than 0.5 seconds", "'w1'", "tests.rpc._targets.sleep"]
    e = expect(TimeoutError, says, rpc.rpc_sync, "w1", T.sleep, args=(5,), timeout=0.5)
    assert isinstance(e, rpc.RpcTimeoutError)
    assert time.monotonic() - t < 3


def test_the_default_timeout_comes_from_the_options(job):
    says = [f"RPC ran for more than {RPC_TIMEOUT_S} seconds"]
    expect(TimeoutError, says, rpc.rpc_async("w1", T.sleep, args=(5,)).wait)


def test_a_remote_past_its_timeout_fails_to_here(job):
    slow = rpc.remote("w1", T.sleep, args=(5,), timeout=0.5)
    time.sleep(0.8)
    expect(TimeoutError, ["RPC ran for more than 0.5 seconds", "remote"], slow.to_here)


def test_timeout_zero_means_no_limit(job):
    assert rpc.rpc_sync("w1", T.add, args=(1, 1), timeout=0) == 2


def test_a_killed_peer_fails_its_calls_fast_and_the_others_keep_serving(job):
    pending = rpc.rpc_async("w2", T.sleep, args=(30,), timeout=20)
    time.sleep(0.3)  # the call is running on w2
    t = time.monotonic()
    job.kill("w2")
    expect(rpc.RpcPeerError, ["'w2'", "lost the connection"], pending.wait)
    assert time.monotonic() - t < 5, time.monotonic() - t
    expect(Exception, ["w2"], rpc.rpc_sync, "w2", T.add, args=(1, 1), timeout=3)
    assert time.monotonic() - t < 8, time.monotonic() - t
    assert rpc.rpc_sync("w1", T.add, args=(2, 2)) == 4
