"""The fault-injecting backend (``FAULTY_TENSORPIPE``) and what survives its faults.

A job of three workers on the backend (``w0`` is the test process; see
``_faulty_workers``): the RRef protocol's and distributed autograd's bookkeeping
messages whose sends fail are sent again (``rpc/_retries``) and none is lost; a
``remote()`` whose send fails fails its RRef's uses, naming the creation; a delayed
call runs into its timeout. Then, in this process: the request types and the
retries (the backend registry itself: ``test_backend_registry.py``).
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

import tensorplay_jax as tp
from tensorplay_jax.distributed import autograd as dist_autograd
from tensorplay_jax.distributed import rpc
from tensorplay_jax.distributed.rpc import _testing
from tensorplay_jax.rpc import _retries, internal
from tests._worker import expect, wait_until
from tests.rpc import _faulty_workers as W
from tests.rpc import _targets as T
from tests.rpc._jobs import Peers


@pytest.fixture(scope="module")
def job():
    with Peers(W.peer, 3, timeout=120) as peers:
        rpc.init_rpc(
            "w0",
            backend=rpc.BackendType.FAULTY_TENSORPIPE,
            rank=0,
            world_size=3,
            rpc_backend_options=W.options(init_method=f"tcp://127.0.0.1:{peers.port}"),
        )
        try:
            yield peers
        finally:
            rpc.shutdown()


def _failed(name: str, where: str = "w0") -> int:
    counts = W.injected() if where == "w0" else rpc.rpc_sync(where, W.injected)
    return counts.get(f"failed {name}", 0)


def test_an_rref_passed_on_outlives_its_failed_fork_and_release_messages(job):
    forks, deletes = _failed("RREF_FORK_REQUEST"), _failed("RREF_USER_DELETE")
    deletes_w2 = _failed("RREF_USER_DELETE", "w2")
    r = rpc.remote("w1", tp.add, args=(tp.ones(3), tp.ones(3)))  # a builtin: not failed
    rpc.rpc_sync("w2", W.hold, args=(r,))  # w0 registers w2's fork with w1: fails twice
    assert rpc.rpc_sync("w2", W.held_total) == 6.0
    del r  # w0's release waits for the fork's registration, then fails twice
    gc.collect()
    rpc.rpc_sync("w2", W.release)  # and w2's
    # Every fork registered and released: none of the messages was lost.
    wait_until(lambda: rpc.rpc_sync("w1", W.owner_counts) == (0, 0), timeout=30)
    assert _failed("RREF_FORK_REQUEST") == forks + W.NUM_FAIL_SENDS
    assert _failed("RREF_USER_DELETE") == deletes + W.NUM_FAIL_SENDS
    assert _failed("RREF_USER_DELETE", "w2") == deletes_w2 + W.NUM_FAIL_SENDS


def test_a_remote_whose_send_fails_fails_its_uses_naming_the_creation(job):
    r = rpc.remote("w1", T.add, args=(1, 2))  # a Python function: its send fails
    expect(
        rpc.RpcPeerError,
        ["to_here: RRef creation failed", "failed intentionally for PYTHON_REMOTE_CALL"],
        r.to_here,
    )
    assert rpc.rpc_sync("w1", T.add, args=(1, 2)) == 3  # the next call goes through


def test_a_delayed_call_runs_into_its_timeout_and_one_without_a_limit_completes(job):
    expect(
        rpc.RpcTimeoutError,
        ["RPC ran for more than 0.3 seconds", "'w1'"],
        rpc.rpc_sync,
        "w1",
        tp.add,
        args=(tp.ones(2), 1),
        timeout=0.3,
    )
    out = rpc.rpc_sync("w1", tp.add, args=(tp.ones(2), 1), timeout=0)
    np.testing.assert_array_equal(np.asarray(out), [2.0, 2.0])
    assert W.injected()["delayed SCRIPT_CALL"] >= 2


def test_a_finished_autograd_context_is_released_on_the_peer_despite_failed_sends(job):
    before = _failed("CLEANUP_AUTOGRAD_CONTEXT_REQ")
    x = tp.ones(3, requires_grad=True)
    with dist_autograd.context() as context_id:
        rpc.rpc_sync("w1", tp.add, args=(x, x))  # w1 now holds the context
    # Asked through w2: a call of this process to w1 would carry the release itself.
    wait_until(
        lambda: not rpc.rpc_sync("w2", W.ask_context_alive, args=("w1", context_id)),
        timeout=30,
    )
    assert _failed("CLEANUP_AUTOGRAD_CONTEXT_REQ") == before + W.NUM_FAIL_SENDS


# ---------------------------------------------------------------- in this process


def _out(kind: int, func=None, extra: tuple = (), metadata: dict | None = None):
    peer = rpc.WorkerInfo("w1", 1)
    name = getattr(func, "__name__", "")
    info = internal.CallInfo(peer, "call", name, 7, metadata or {}, func)
    return internal.Outgoing(peer, kind, info, extra, b"")


@pytest.mark.parametrize(
    "kind,func,extra,expected",
    [
        (internal.CALL, tp.add, (), "SCRIPT_CALL"),
        (internal.CALL, T.add, (), "PYTHON_CALL"),
        (internal.REMOTE, tp.mul, (5, 6), "SCRIPT_REMOTE_CALL"),
        (internal.REMOTE, T.add, (5, 6), "PYTHON_REMOTE_CALL"),
        (internal.FETCH, None, (5,), "PYTHON_RREF_FETCH_CALL"),
        (internal.FORK_ADD, None, (5, 6), "RREF_FORK_REQUEST"),
        (internal.FORK_DEL, None, (5, 6), "RREF_USER_DELETE"),
        (internal.PING, None, (), None),
    ],
)
def test_requests_have_tensorplays_message_types(kind, func, extra, expected):
    assert _testing.message_type(_out(kind, func, extra)) == expected


def test_fetches_autograd_and_internal_calls_have_their_message_types():
    assert _testing.message_type(_out(internal.FETCH, None, (5,)), {5: True}) == (
        "SCRIPT_RREF_FETCH_CALL"
    )
    in_context = _out(internal.CALL, T.add, (), {dist_autograd._context.META_KEY: 3})
    assert _testing.message_type(in_context) == "FORWARD_AUTOGRAD_REQ"
    release = _out(internal.CALL, dist_autograd._context._release_remote)
    assert _testing.message_type(release) == "CLEANUP_AUTOGRAD_CONTEXT_REQ"
    own = _out(internal.CALL, internal.internal_target(lambda: None))
    assert _testing.message_type(own) is None


def _sends(errors: list[BaseException | None]):
    """A send whose attempts end with ``errors`` in turn (None: the reply); and its log."""
    attempts: list[int] = []

    def send():
        attempts.append(len(attempts))
        fut = rpc.Future()
        error = errors[len(attempts) - 1]
        if error is None:
            fut.set_result(len(attempts))
        else:
            fut.set_exception(error)
        return fut

    return send, attempts


@pytest.fixture
def quick_retries(monkeypatch):
    monkeypatch.setattr(_retries, "RETRY_S", 0.01)


def test_a_message_that_did_not_reach_its_peer_is_sent_again_until_it_does(quick_retries):
    send, attempts = _sends([rpc.RpcPeerError("lost"), rpc.RpcPeerError("lost"), None])
    assert _retries.with_retries(send, "a release").wait(10) == 3
    assert len(attempts) == 3
    wait_until(lambda: _retries.waiting() == 0, timeout=5)


def test_a_peers_own_error_is_not_sent_again(quick_retries):
    send, attempts = _sends([ValueError("the owner refused"), None])
    fut = _retries.with_retries(send, "a release")
    assert isinstance(fut.exception(10), ValueError) and len(attempts) == 1


def test_retries_end_after_max_retries_with_the_last_error(quick_retries):
    errors = [rpc.RpcPeerError(f"lost {i}") for i in range(_retries.MAX_RETRIES + 1)]
    send, attempts = _sends([*errors, None])
    exc = _retries.with_retries(send, "a release").exception(30)
    assert str(exc) == f"lost {_retries.MAX_RETRIES}"
    assert len(attempts) == _retries.MAX_RETRIES + 1


def test_the_faulty_backend_refuses_other_options_in_tensorplays_words():
    # The agent handler init_rpc calls, before any rendezvous (RPC runs in this module).
    with pytest.raises(TypeError, match="must be a `FaultyTensorPipeRpcBackendOptions`"):
        rpc.backend_registry.init_backend(
            rpc.BackendType.FAULTY_TENSORPIPE, "solo", 0, 1, rpc.TensorPipeRpcBackendOptions()
        )
