"""The public RPC API across real worker processes on loopback, on each transport.

One job of three workers per transport serves every test of this module: ``w0`` is
the test process, ``w1`` and ``w2`` are started workers. Start-up and shutdown
(world size one, duplicate names, a worker still in ``init_rpc``) are in
``test_init.py``.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from tensorplay_jax import rpc
from tests._worker import expect, wait_until
from tests.rpc import _targets as T
from tests.rpc import _transports as TR
from tests.rpc._jobs import rpc_job


@pytest.fixture(scope="module", params=TR.NAMES)
def job(request):
    with rpc_job(3, request.param) as w:
        yield w


X = np.arange(4.0, dtype=np.float32)


# ----------------------------------------------------------------- workers and destinations
def test_worker_info_names_every_worker(job):
    assert rpc.get_worker_info() == rpc.WorkerInfo("w0", 0)
    assert rpc.get_worker_info("w1").id == 1
    for name in ("w1", "w2"):
        assert job.run(name, rpc.get_worker_info) == rpc.WorkerInfo(name, int(name[1]))


@pytest.mark.parametrize(
    "to", ["w1", 1, "info", "w0", 0], ids=["name", "rank", "WorkerInfo", "self-name", "self-rank"]
)
def test_a_destination_is_a_name_a_rank_or_a_worker_info(job, to):
    to = rpc.get_worker_info("w1") if to == "info" else to
    x = jnp.asarray(X)
    y = rpc.rpc_sync(to, T.add, args=(x, 1))
    assert isinstance(y, type(x))
    np.testing.assert_array_equal(np.asarray(y), X + 1)


def test_kwargs_and_numpy_results(job):
    y = rpc.rpc_sync("w2", T.add, args=(np.ones(3),), kwargs={"y": 2})
    assert type(y) is np.ndarray
    np.testing.assert_array_equal(y, np.full(3, 3.0))


def test_a_lambda_with_a_closure_goes_by_value(job):
    k = 5
    assert rpc.rpc_sync("w1", lambda a: a + k, args=(1,)) == 6


def test_containers_namedtuples_and_dtypes_keep_their_types(job):
    x = jnp.asarray(X)
    out = rpc.rpc_sync("w1", T.identity, args=({"a": (x, [np.int8(3)]), "p": T.Pair(1, x)},))
    assert isinstance(out["a"], tuple) and isinstance(out["p"], T.Pair)
    assert out["a"][1][0].dtype == np.int8 and out["a"][1][0] == 3
    np.testing.assert_array_equal(np.asarray(out["p"].b), X)


# ----------------------------------------------------------------- futures
def test_wait_all_gathers_results_in_order(job):
    futs = [rpc.rpc_async(f"w{i % 3}", T.add, args=(i, 1)) for i in range(30)]
    assert rpc.wait_all(futs) == list(range(1, 31))
    assert all(f.done() for f in futs)


def test_then_chains_on_the_result(job):
    assert rpc.rpc_async("w2", T.add, args=(1, 2)).then(lambda f: f.wait() * 10).wait() == 30


def test_a_done_callback_sees_the_value(job):
    seen = []
    f = rpc.rpc_async("w2", T.add, args=(2, 2))
    f.add_done_callback(lambda fut: seen.append(fut.value()))
    f.wait()
    wait_until(lambda: seen == [4])


def test_a_callback_that_raises_stops_no_other_one(job):
    seen = []
    slow = rpc.rpc_async("w2", T.sleep, args=(0.3,))  # the callbacks are in place by then
    slow.add_done_callback(lambda fut: 1 / 0)
    slow.add_done_callback(lambda fut: seen.append(fut.value()))
    assert slow.wait() == 0.3
    wait_until(lambda: seen == [0.3])


# ----------------------------------------------------------------- remote errors
def test_a_remote_error_keeps_its_type_and_the_remote_traceback(job):
    says = ["boom", "Remote traceback", "'w1'", "in fail", "tests.rpc._targets.fail"]
    expect(ValueError, says, rpc.rpc_sync, "w1", T.fail, args=("boom",))
    assert rpc.rpc_sync("w1", T.add, args=(1, 1)) == 2  # the callee keeps serving


def test_an_error_that_cannot_be_rebuilt_arrives_as_runtime_error(job):
    says = ["CustomError", "Original exception on remote side was"]
    expect(RuntimeError, says, rpc.rpc_sync, "w1", T.fail_custom)
    assert rpc.rpc_sync("w1", T.add, args=(1, 1)) == 2


# ----------------------------------------------------------------- remote() and RRef
def test_remote_rref_knows_its_owner(job):
    rref = rpc.remote("w1", T.make_counter, args=(10,))
    assert rref.owner() == rpc.get_worker_info("w1") and rref.owner_name() == "w1"
    assert not rref.is_owner()


def test_rref_proxies_and_to_here(job):
    rref = rpc.remote("w1", T.make_counter, args=(10,))
    assert rref.rpc_sync().incr(5) == 15
    assert rref.rpc_async().incr(1).wait() == 16
    assert rref.remote().value().to_here() == 16
    assert rref.to_here() == T.Counter(16) and rref.confirmed_by_owner()
    assert rpc.rpc_sync("w2", T.read_counter, args=([rref],)) == 16  # used by a third worker


def test_local_value_only_on_the_owner(job):
    rref = rpc.remote("w1", T.make_counter, args=(1,))
    expect(
        RuntimeError,
        [
            "local_value() can only be called on the owner",
            "Call it on owner WorkerInfo(id=1, name=w1)",
        ],
        rref.local_value,
    )


def test_an_rref_this_worker_owns(job):
    mine = rpc.RRef(np.arange(3))
    assert mine.is_owner() and mine.confirmed_by_owner() and mine.local_value().sum() == 3
    assert rpc.rpc_sync("w1", T.rref_sum, args=(mine,)) == 3
    try:  # sent to its owner (this worker) it is local there
        assert rpc.rpc_sync("w0", T.keep, args=(mine,)) is True
    finally:
        T.drop()


def test_an_rref_made_by_another_worker_comes_back(job):
    r3 = rpc.rpc_sync("w2", T.make_rref, args=(7,))
    assert r3.owner_name() == "w2" and r3.to_here() == 7


def test_remote_to_this_worker(job):
    assert rpc.remote("w0", T.add, args=(1, 2)).to_here() == 3


def test_a_creation_error_surfaces_on_use(job):
    bad = rpc.remote("w1", T.fail, args=("late",))
    expect(ValueError, ["late"], bad.to_here)
    expect(ValueError, ["late"], lambda: bad.rpc_sync().anything())


def test_async_execution_returns_the_future_s_value(job):
    assert rpc.rpc_sync("w1", T.async_add, args=("w2", 1, 2)) == 3


# ----------------------------------------------------------------- metadata and hooks
def test_call_metadata_travels_with_calls_and_remote(job):
    with rpc.call_metadata(ctx_id=42):
        assert rpc.rpc_sync("w1", T.get_metadata) == {"ctx_id": 42}
        assert rpc.remote("w2", T.get_metadata).to_here() == {"ctx_id": 42}
    assert rpc.rpc_sync("w1", T.get_metadata) == {}


def test_the_callee_sees_its_caller(job):
    assert rpc.rpc_sync("w2", T.caller_name) == "w0"


def test_hooks_on_both_sides_see_and_rewrite_the_call(job):
    rpc.rpc_sync("w1", T.install_hooks)
    T.install_hooks()
    try:
        assert rpc.rpc_sync("w1", T.add, args=(3, 4)) == 7
        mine, theirs = T.events(), rpc.rpc_sync("w1", T.events)
    finally:
        T.remove_hooks()
        rpc.rpc_sync("w1", T.remove_hooks)
    assert "('send_request', 'call', 'tests.rpc._targets.add', (3, 4))" in mine, mine
    assert "('receive_response', 'call', {'served_by': '1'}, 7)" in mine, mine
    assert "('receive_request', 'call', 'w0', {'hooked': True})" in theirs, theirs
    assert "('send_response', 'call', 7)" in theirs, theirs


# ----------------------------------------------------------------- clear errors
@pytest.mark.parametrize("to", ["nope", 7, "info"], ids=["name", "rank", "WorkerInfo"])
def test_an_unknown_destination_is_a_clear_error(job, to):
    to = rpc.WorkerInfo("w1", 2) if to == "info" else to
    expect(ValueError, ["unknown destination worker"], rpc.rpc_sync, to, T.add, args=(1,))


def test_a_function_that_is_not_callable_is_a_clear_error(job):
    expect(TypeError, ["not callable"], rpc.rpc_sync, "w1", 3)


def test_init_rpc_twice_is_a_clear_error(job):
    expect(RuntimeError, ["already initialized", "w0"], rpc.init_rpc, "again", rank=0, world_size=3)
