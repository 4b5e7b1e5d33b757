"""Starting and ending RPC: world size one, names, duplicates, a late worker, shutdown.

World-size-one jobs run in the test process itself; the others join it with peers
started for the test (``_jobs.Peers``), which hand back what they saw.
"""

from __future__ import annotations

import time
import warnings

import pytest

from tensorplay_jax import rpc
from tensorplay_jax.testing import Workers
from tests._procs import free_port, reported
from tests._worker import expect
from tests.rpc import _targets as T
from tests.rpc import _transports as TR
from tests.rpc import _workers as W
from tests.rpc._jobs import Peers, environ

NOT_INITIALIZED = "RPC has not been initialized"


@pytest.fixture
def master(monkeypatch) -> None:
    """A rendezvous address for a world of one in this process."""
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))


@pytest.fixture
def shut_down():
    """Leaves RPC shut down in this process, whatever the test did."""
    yield
    if rpc.is_initialized():
        rpc.shutdown(graceful=False)


# ----------------------------------------------------------------- world size one
@pytest.mark.parametrize("call", [rpc.rpc_sync, rpc.remote], ids=["rpc_sync", "remote"])
def test_a_call_before_init_rpc_is_a_clear_error(call):
    expect(RuntimeError, [NOT_INITIALIZED], call, "w0", T.add, args=(1,))


def test_an_rref_before_init_rpc_is_torchs_error():
    # rpc_test.py's test_pg_init_no_rpc_init matches tensorplay's words
    says = ["Current RPC agent is not set! Did you initialize the RPC framework", NOT_INITIALIZED]
    expect(RuntimeError, says, rpc.RRef, 1)


@pytest.mark.parametrize("name", ["bad name!", "", "a" * 128])
def test_an_invalid_worker_name_is_refused(master, shut_down, name):
    e = expect(RuntimeError, ["invalid worker name", "Worker name must match"],
               rpc.init_rpc, name, rank=0, world_size=1)  # fmt: skip
    assert isinstance(e, ValueError)  # what it was before
    assert not rpc.is_initialized()


# tensorplay's test_invalid_names: WorkerInfo itself checks the name
@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("abc*", "Worker name must match"),
        (" ", "Worker name must match"),
        ("", "must be non-empty"),
        ("a" * 500, "shorter than 128"),
    ],
)
def test_worker_info_refuses_an_invalid_name(name, says):
    e = expect(RuntimeError, [says], rpc.WorkerInfo, name, 0)
    assert isinstance(e, ValueError)


class _OtherOptions(rpc.RpcBackendOptions):
    """Options of a backend that is not ours (tensorplay's suites define one)."""


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"backend": "TENSORPIPE"}, "Argument backend must be a member of BackendType"),
        (
            {"rpc_backend_options": {"init_method": "env://"}},
            "must be an instance of RpcBackendOptions",
        ),
        ({"rpc_backend_options": _OtherOptions()}, "Could not infer backend for options"),
        (
            {"backend": rpc.BackendType.TENSORPIPE, "rpc_backend_options": _OtherOptions()},
            "`rpc_backend_options` must be a `TensorPipeRpcBackendOptions`",
        ),
    ],
    ids=["backend-string", "options-dict", "options-not-ours", "backend-with-other-options"],
)
def test_a_wrong_backend_or_options_is_a_type_error_before_anything_starts(kwargs, says):
    expect(TypeError, [says], rpc.init_rpc, "w0", rank=0, world_size=1, **kwargs)
    assert not rpc.is_initialized()


def test_a_name_of_127_characters_is_valid():
    assert rpc.WorkerInfo("a" * 127, 0).name == "a" * 127


def test_a_world_of_one_calls_itself(master, shut_down):
    opts = rpc.GrpcRpcBackendOptions(rpc_timeout=5, num_worker_threads=4)
    rpc.init_rpc("solo", rank=0, world_size=1, rpc_backend_options=opts)
    me = rpc.get_worker_info()
    for to in ("solo", 0, me):
        assert rpc.rpc_sync(to, T.add, args=(1, 2)) == 3, to
    r = rpc.remote(me, T.make_counter, args=(1,))
    assert r.rpc_sync().incr(1) == 2
    assert rpc.rpc_sync("solo", T.read_counter, args=([r],)) == 2
    del r
    rpc.shutdown()
    expect(RuntimeError, [NOT_INITIALIZED], rpc.rpc_sync, "solo", T.add, args=(1,))
    expect(RuntimeError, [NOT_INITIALIZED], rpc.shutdown)


def test_init_rpc_again_after_shutdown(master, shut_down):
    rpc.init_rpc("solo", rank=0, world_size=1)
    rpc.shutdown()
    rpc.init_rpc("solo2", rank=0, world_size=1)
    assert rpc.rpc_sync("solo2", max, args=(1, 2)) == 2
    rpc.shutdown()


# ----------------------------------------------------------------- two workers
def test_duplicate_names_fail_on_every_worker(shut_down):
    says = ["duplicate worker name 'same'", "ranks 0 and 1", "is not unique"]
    with Peers(W.duplicate_peer, 2, timeout=90) as peers:
        e = expect(RuntimeError, says, rpc.init_rpc, "same", rank=0, world_size=2,
                   rpc_backend_options=peers.options())  # fmt: skip
    assert isinstance(e, ValueError)  # what it was before
    theirs = reported(peers.results[0])["error"]
    assert theirs.startswith("WorkerNameError") and all(s in theirs for s in says), theirs


# A worker whose init_rpc returns late: w0 calls it (and it calls on, from inside the
# call) after the rendezvous, before its init_rpc has returned. The call waits for it.
# Then w2 keeps an RRef to a value on w1, and every worker shuts down gracefully.
@pytest.fixture(scope="module", params=TR.NAMES)
def late_job(request):
    env = TR.env_of(request.param)
    with environ(env), Peers(W.late_peer, 3, env=env, timeout=120) as peers:
        rpc.init_rpc("w0", rank=0, world_size=3, rpc_backend_options=peers.options())
        try:
            t0 = time.monotonic()
            relay = rpc.rpc_sync("w1", T.relay_caller, args=("w2",))
            took = time.monotonic() - t0
            # w2 holds an RRef to a value on w1 when every worker shuts down
            rpc.rpc_sync("w2", T.keep, args=(rpc.remote("w1", T.make_tracked, args=(5,)),))
        finally:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                rpc.shutdown()
        mine = {
            "warnings": [str(w.message) for w in caught],
            "after_shutdown": W.after_shutdown_errors("w1"),
        }
    return {"relay": relay, "took": took, "ranks": [mine, *map(reported, peers.results)]}


def test_a_call_into_a_worker_still_in_init_rpc_waits_for_it(late_job):
    # w1 ran the relay (named itself), and w2 saw w1 as the caller of the nested call
    assert list(late_job["relay"]) == ["w1", "w1"], late_job


def test_graceful_shutdown_warns_of_nothing_on_any_worker(late_job):
    # no RRef leak reported either: w2's RRef to w1's value was released
    for rank, got in enumerate(late_job["ranks"]):
        assert got["warnings"] == [], (rank, got)


def test_graceful_shutdown_ends_rpc_on_every_worker(late_job):
    for rank, got in enumerate(late_job["ranks"]):
        for err in got["after_shutdown"]:
            assert err is not None and NOT_INITIALIZED in err, (rank, got)
            assert issubclass(getattr(rpc, err.split(":")[0]), RuntimeError), (rank, got)


def test_workers_close_after_the_test_shut_rpc_down_is_not_a_death():
    # the workers exit 0 after the graceful shutdown this process took part in
    w = Workers(2, timeout=60).start()
    try:
        rpc.shutdown(graceful=True)
        deadline = time.monotonic() + 60  # the worker's own shutdown returns; it exits 0
        while any(p.poll() is None for p in w._group.procs) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        w.close()


def test_a_user_rref_used_after_shutdown_says_it_was_deleted():
    w = Workers(2, timeout=60).start()  # this process is w0, the owner a started worker
    try:
        rref = rpc.remote(w.names[1], T.add, args=(1, 2))
        assert rref.to_here() == 3
        rpc.shutdown(graceful=True)
        e = expect(RuntimeError, ["Cannot call to_here() on it after deletion"], rref.to_here)
        assert "shut down" in str(e)
    finally:
        w.close()
