"""rpc.shutdown always returns in bounded time: a FETCH for an id never created, a stopped peer,
an interpreter exit with the store's host stopped or a served call that never ends."""

from __future__ import annotations

import inspect
import json

import pytest

from tensorplay_jax.distributed import rpc
from tensorplay_jax.runtime.settings import RPC_SHUTDOWN_PING_TIMEOUT_S
from tests._procs import WorkerResult
from tests.rpc._transports import env_of
from tests.security import _shutdown_workers as W

TRANSPORTS = ["local", "grpc"]
# shutdown(timeout=T) must return within T + 1 s; the rest is for a loaded 2-core machine
# (a normal two-worker shutdown takes about 0.8 s).
LATE_S = 1.5
# Without the fixes these cases hang for ever: the worker processes get this long.
PROCS_TIMEOUT_S = 60


def _env(transport: str, **extra: object) -> dict[str, str]:
    return env_of(transport, **{k: str(v) for k, v in extra.items()})


def _results(res: list[WorkerResult]) -> dict[int, list[dict]]:
    """The ``RESULT`` lines of each rank, decoded."""
    out: dict[int, list[dict]] = {}
    for r in res:
        lines = [ln[len("RESULT ") :] for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
        out[r.rank] = [json.loads(ln) for ln in lines]
    return out


def _one(res: list[WorkerResult], rank: int) -> dict:
    got = _results(res)[rank]
    assert len(got) == 1, "\n".join(str(r) for r in res)
    return got[0]


def test_default_bound_is_a_named_constant_in_the_docstring():
    default = inspect.signature(rpc.shutdown).parameters["timeout"].default
    assert default == -1
    assert "RPC_SHUTDOWN_PING_TIMEOUT_S" in rpc.shutdown.__doc__
    assert f"{RPC_SHUTDOWN_PING_TIMEOUT_S:g} s" in rpc.shutdown.__doc__
    assert RPC_SHUTDOWN_PING_TIMEOUT_S > 0


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_default_waits_for_a_worker_that_is_still_working(workers, transport):
    # tensorplay's shutdown waits for as long as the others work (a parameter server
    # waits for its trainers): the default has no time limit while they answer pings.
    # Before: the default gave up after 60 s. Here pings come every 0.5 s, each given 2 s,
    # and rank 1 works for 5 s: two and a half times the ping timeout, ten pings.
    work_s = 5
    env = _env(transport, TPJ_PING="0.5,2", TPJ_WORK_S=work_s)
    res = workers(W.long_worker, 2, timeout=PROCS_TIMEOUT_S, check=False, env=env)
    got = _one(res, 0)
    assert got["error"] is None, got
    assert got["elapsed"] > work_s - 1, got
    assert _one(res, 1)["error"] is None, res[1]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_fetch_of_a_never_created_rref_from_a_peer_that_hangs_up(workers, transport):
    # The owner parks such a fetch (the creating remote() may still be on its way); once
    # the requester's connection closes nothing can take the reply: it must be dropped,
    # not waited on by shutdown. Before: shutdown(timeout=20) gave up after 20 s, the fetch
    # still counted as work in flight (and with no timeout it never returned).
    env = _env(transport, TPJ_SHUTDOWN_TIMEOUT=20)
    res = workers(W.fetch_then_disconnect, 2, timeout=PROCS_TIMEOUT_S, check=False, env=env)
    for rank in (0, 1):
        got = _one(res, rank)
        assert got["error"] is None, got
        assert got["elapsed"] < 8, got
        assert res[rank].returncode == 0, res[rank]
    assert "RRef leak check" not in res[0].stderr, res[0]  # the parked record is gone too


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_fetch_of_a_never_created_rref_ends_with_the_owners_rpc_timeout(workers, transport):
    # The requester set no limit of its own (timeout=0) and stays connected: the owner's
    # rpc_timeout ends the wait with an error that names the id. Before: no reply, ever.
    env = _env(transport, TPJ_RPC_TIMEOUT=2, TPJ_FETCH_WAIT=15, TPJ_SHUTDOWN_TIMEOUT=20)
    res = workers(W.fetch_never_created, 2, timeout=PROCS_TIMEOUT_S, check=False, env=env)
    got = _one(res, 1)
    assert got["fetch"].startswith("RpcTimeoutError"), got
    for s in [f"{W.NEVER_CREATED:#x}", "'w0'", "was never created", "rpc_timeout=2"]:
        assert s in got["fetch"], (s, got)
    assert 1.5 < got["fetch_s"] < 2 + 3, got
    for rank in (0, 1):
        got = _one(res, rank)
        assert got["error"] is None and got["elapsed"] < 8, got
    assert "RRef leak check" not in res[0].stderr, res[0]


@pytest.mark.parametrize(
    "transport, bound",
    [("local", "2.5"), ("grpc", "2.5"), ("local", "default")],
    ids=["local-timeout", "grpc-timeout", "default-bound"],
)
@pytest.mark.parametrize("frozen", [1, 0], ids=["peer-stopped", "store-host-stopped"])
def test_shutdown_is_bounded_with_a_stopped_peer(workers, transport, bound, frozen):
    # SIGSTOP: the peer is alive (its connections stay open) but answers nothing, as
    # behind a network partition. Before: shutdown(timeout=10) took 20.4 s, the default
    # blocked for ever, and so did any timeout when the store's host was the one stopped.
    if bound == "default":  # no answer to a ping: every 0.5 s, each given 2 s here
        timeout, extra = 2.5, {"TPJ_PING": "0.5,2"}
    else:
        timeout, extra = float(bound), {"TPJ_SHUTDOWN_TIMEOUT": float(bound)}
    env = _env(transport, TPJ_FROZEN=frozen, **extra)
    res = workers(
        W.frozen_peer, 2, timeout=PROCS_TIMEOUT_S, check=False, env=env, allow_exit={frozen: -9}
    )
    got = _one(res, 1 - frozen)
    assert got["error"] == "RpcTimeoutError", (
        got
    )  # a TimeoutError and, as tensorplay, a RuntimeError
    assert f"ranks [{frozen}] did not arrive" in got["message"], got
    assert timeout - 0.5 < got["elapsed"] < timeout + LATE_S, got
    assert res[1 - frozen].returncode == 0, res[1 - frozen]
    assert res[frozen].returncode == -9, res[frozen]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_exit_without_shutdown_while_the_store_host_is_stopped(workers, transport):
    # The exit hook stops RPC without the barrier, but still tells the store it leaves.
    # Before: that goodbye waited for ever on the stopped store.
    env = _env(transport)
    res = workers(
        W.exit_with_frozen_store, 2, timeout=PROCS_TIMEOUT_S, check=False, env=env,
        allow_exit={0: -9},
    )  # fmt: skip
    got = _one(res, 1)
    assert got["elapsed"] < 5, got
    assert res[1].returncode == 0, res[1]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_process_exits_while_a_served_call_never_ends(workers, transport):
    # Rank 0 serves a call that sleeps for an hour: shutdown reports it and gives up,
    # and the interpreter must not wait for that call at exit.
    timeout = 2.0
    env = _env(transport, TPJ_SHUTDOWN_TIMEOUT=timeout)
    res = workers(W.exit_with_call_stuck, 2, timeout=PROCS_TIMEOUT_S, check=False, env=env)
    by_rank = _results(res)
    stop0, exit0 = by_rank[0]
    assert stop0["error"] == "RpcTimeoutError", stop0
    assert "still has 1 RPCs outstanding" in stop0["message"], stop0
    assert stop0["elapsed"] < timeout + LATE_S, stop0
    stop1, _ = by_rank[1]  # gave up on rank 0, or saw it leave first
    assert stop1["elapsed"] < timeout + LATE_S, stop1
    if stop1["error"] is not None:
        assert "ranks [0] did not arrive" in stop1["message"], stop1
    assert exit0["phase"] == "exit" and exit0["elapsed"] < timeout + 5, exit0
    for r in res:
        assert r.returncode == 0, r
