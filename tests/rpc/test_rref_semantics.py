"""RRefs as tensorplay's tests expect them, across real worker processes.

``w0`` is the test process; ``w1`` and ``w2`` are started workers. The oracle is
tensorplay's own RPC test suite (``rpc_test.py``): a ``remote()`` to the worker
itself gives an RRef that worker owns (``test_self_remote_rref_as_rpc_arg`` and
its kin, ``test_local_rref_no_fork``); a proxy honours ``async_execution`` on
bound, static and class methods (``test_async_class_rref_proxy*``); a user RRef
is confirmed when it arrives (``test_user_rrefs_confirmed*``); and a proxy call
of a missing attribute raises ``AttributeError`` (``test_rref_proxy_non_exist``).
"""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
import pytest

from tensorplay_jax import rpc
from tests._worker import wait_until
from tests.rpc import _rref_targets as R
from tests.rpc._jobs import rpc_job


@pytest.fixture(scope="module")
def job():
    with rpc_job(3) as w:
        yield w


X = np.ones((2, 2))
Y = X + 1


def proxied(rref: rpc.RRef, mode: str, method: str, *args: Any) -> Any:
    """``rref.<mode>().<method>(*args)``, waited for: its value."""
    out = getattr(getattr(rref, mode)(), method)(*args)
    if mode == "rpc_async":
        return out.wait()
    return out.to_here() if mode == "remote" else out


# ------------------------------------------------------------- remote() to itself
@pytest.mark.parametrize("to", ["w0", 0, "info"], ids=["name", "rank", "WorkerInfo"])
def test_a_remote_to_itself_gives_an_rref_it_owns(job, to):
    r = rpc.remote(rpc.get_worker_info() if to == "info" else to, R.Box, args=(3,))
    assert r.is_owner()
    assert r.local_value().v == 3


def test_the_value_of_a_remote_to_itself_is_the_object_the_function_returned(job):
    r = rpc.remote("w0", R.shared)
    assert r.to_here() is R.SHARED
    assert r.local_value() is R.SHARED


def test_to_here_of_a_remote_to_itself_returns_the_same_object_each_time(job):
    r = rpc.remote("w0", R.Box, args=(3,))
    first = r.to_here()
    assert r.to_here() is first
    grads = {r.local_value(): "grad"}  # the trainer / parameter server pattern
    assert grads[r.to_here()] == "grad"


@pytest.mark.parametrize("to", ["w1", "w0"], ids=["other", "self"])
def test_an_rref_made_by_a_remote_to_itself_is_an_rpc_argument(job, to):
    r = rpc.remote("w0", R.Box, args=(3,))
    fut = rpc.rpc_async(to, R.add_rref_to_value, args=(r, 1))
    assert rpc.rpc_sync(to, R.add_rref_to_value, args=(r, 2)) == 5
    assert fut.wait() == 4


@pytest.mark.parametrize("to", ["w1", "w0"], ids=["other", "self"])
def test_an_rref_made_by_a_remote_to_itself_is_a_remote_argument(job, to):
    r = rpc.remote("w0", R.Box, args=(3,))
    assert rpc.remote(to, R.add_rref_to_value, args=(r, 1)).to_here() == 4


def test_a_failing_remote_to_itself_raises_its_error_on_use(job):
    r = rpc.remote("w0", R.fail, args=("boom",))
    with pytest.raises(ValueError, match="boom"):
        r.to_here()
    with pytest.raises(ValueError, match="boom"):
        r.local_value()


def test_a_remote_to_itself_passed_around_then_dropped_leaves_nothing_owned(job):
    r = rpc.remote("w0", R.Box, args=(3,))
    assert rpc.rpc_sync("w1", R.add_rref_to_value, args=(r, 1)) == 4
    del r
    gc.collect()
    wait_until(lambda: rpc.get_debug_info()["num_owner_rrefs"] == 0)


# ------------------------------------------------------------- async_execution proxies
@pytest.mark.parametrize("mode", ["rpc_sync", "rpc_async", "remote"])
@pytest.mark.parametrize("method", ["static_async_add", "class_async_add", "bound_async_add"])
def test_an_async_execution_method_through_a_proxy_replies_with_its_futures_result(
    job, mode, method
):
    rref = rpc.remote("w1", R.AsyncExecutionClass)
    np.testing.assert_array_equal(proxied(rref, mode, method, "w2", X, X, Y), 4 * X)


@pytest.mark.parametrize("mode", ["rpc_sync", "rpc_async", "remote"])
def test_an_async_execution_method_through_a_proxy_of_an_rref_owned_here(job, mode):
    rref = rpc.RRef(R.AsyncExecutionClass())
    np.testing.assert_array_equal(proxied(rref, mode, "bound_async_add", "w1", X, X, Y), 4 * X)


# ------------------------------------------------------------- confirmed_by_owner
def test_an_rref_received_from_its_owner_is_confirmed(job):
    r = rpc.rpc_sync("w1", R.own, args=(1,))
    assert not r.is_owner()
    assert r.confirmed_by_owner()


@pytest.mark.parametrize("via", ["rpc_sync", "remote"])
def test_a_user_rref_passed_on_by_a_user_is_confirmed_where_it_arrives(job, via):
    rref = rpc.remote("w2", R.add, args=(X, 1))  # owned by w2, passed to w1 by this user
    if via == "rpc_sync":
        assert rpc.rpc_sync("w1", R.confirmed, args=(rref,)) is True
    else:
        assert rpc.remote("w1", R.confirmed, args=(rref,)).to_here() is True


# ------------------------------------------------------------- a missing attribute
@pytest.mark.parametrize("owner", ["w1", "w0"], ids=["other", "self"])
@pytest.mark.parametrize("mode", ["rpc_sync", "rpc_async", "remote"])
def test_a_proxy_call_of_a_missing_attribute_raises_attribute_error(job, mode, owner):
    rref = rpc.remote(owner, R.Box, args=(1,))
    proxy = getattr(rref, mode)()
    with pytest.raises(AttributeError, match="has no attribute 'non_exist'"):
        out = proxy.non_exist()  # remote(): raises here, at the call
        if mode == "rpc_async":
            out.wait()


# ------------------------------------------------------------- _get_type, _get_future
@pytest.mark.parametrize("blocking", [True, False], ids=["blocking", "future"])
def test_get_type_answers_the_values_type_from_the_owner(job, blocking):
    r = rpc.remote("w1", R.Box, args=(3,))
    got = r._get_type(blocking=blocking)
    assert (got if blocking else got.wait()) is R.Box
    assert rpc.RRef(X)._get_type() is np.ndarray  # an owner answers itself


@pytest.mark.parametrize("blocking", [True, False], ids=["blocking", "future"])
def test_get_type_raises_the_error_that_created_the_value(job, blocking):
    r = rpc.remote("w1", R.fail, args=("Expected error",))
    with pytest.raises(ValueError, match="Expected error"):
        got = r._get_type(blocking=blocking)
        if not blocking:
            got.wait()


def test_get_type_not_blocking_after_the_creation_failed_is_a_future_that_raises(job):
    # tensorplay's test_rref_type_with_error_non_blocking, with the error surely back first
    r = rpc.remote("w1", R.fail, args=("Expected error",))
    wait_until(lambda: r._get_future().done(), timeout=10)
    fut = r._get_type(blocking=False)  # no raise here: torch returns the Future
    with pytest.raises(ValueError, match="Expected error"):
        fut.wait()


def test_get_type_of_a_slow_creation_times_out_with_rpcs_message(job):
    r = rpc.remote("w1", R.slow_box, args=(2.0,))
    with pytest.raises(rpc.RpcTimeoutError, match="RPC ran for more than"):
        r._get_type(timeout=0.3)
    assert r._get_type() is R.Box  # and answers once it is made


def test_get_future_is_the_creation_future(job):
    fut = rpc.remote("w1", R.slow_box, args=(0.5,))._get_future()
    assert not fut.done()  # the owner is still making the value
    fut.wait()
    with pytest.raises(ValueError, match="no box"):
        rpc.remote("w1", R.fail, args=("no box",))._get_future().wait()
    assert rpc.RRef(X)._get_future().done()  # an owner's own value is made


# ------------------------------------------------------------- tensorplay's spelling
def test_an_rref_reads_as_tensorplays_with_its_globally_unique_ids(job):
    import re

    owner = re.fullmatch(r"OwnerRRef\(GloballyUniqueId\(created_on=0, local_id=(\d+)\)\)",
                         repr(rpc.RRef(1)))  # fmt: skip
    assert owner, repr(rpc.RRef(1))
    user = rpc.remote("w1", R.add, args=(1, 2))
    ids = re.fullmatch(
        r"UserRRef\(RRefId = GloballyUniqueId\(created_on=0, local_id=(\d+)\), "
        r"ForkId = GloballyUniqueId\(created_on=0, local_id=(\d+)\)\)",
        repr(user),
    )
    assert ids, repr(user)
    assert int(ids[1]) > int(owner[1]) and int(ids[2]) == int(ids[1]) + 1  # one serial per worker
    with pytest.raises(RuntimeError, match=r"For UserRRef\(rref_id=GloballyUniqueId\(created_on=0"):
        user.local_value()


def test_an_rref_is_not_pickled_outside_rpc(job, tmp_path):
    import pickle

    import tensorplay_jax as tp

    for save in (pickle.dumps, lambda r: tp.save(r, tmp_path / "rref.pt")):
        with pytest.raises(RuntimeError, match="Can not pickle rref in python pickler") as e:
            save(rpc.RRef(X))
        assert isinstance(e.value, TypeError)  # what it was before
