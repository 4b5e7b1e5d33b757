"""Worker code for test_shutdown_bounds: each function runs in every rank (see tests._procs).

Every worker prints one ``RESULT {json}`` line per shutdown it timed: its rank,
the seconds ``rpc.shutdown`` took, and the error it raised (type and message),
so the test can check bounds and messages from the parent process. Settings
come from the environment: ``TPJ_SHUTDOWN_TIMEOUT`` (seconds, or ``default``),
``TPJ_FROZEN`` (the rank another worker stops with SIGSTOP).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import time
from typing import Any

from tensorplay_jax.distributed import rpc
from tensorplay_jax.rpc import _agent, _codec, _grpc, _local, _protocol, _shutdown
from tests.security._common import wait_until

# An RRef id no worker ever created (rank 0's ids start at 1; rank 0x7ff is no rank here).
NEVER_CREATED = (0x7FF << 40) | 12345
POLL_S = 0.05


def _env() -> tuple[int, int]:
    return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


def _init(**options: Any) -> tuple[int, int]:
    rank, ws = _env()
    opts = rpc.GrpcRpcBackendOptions(**options)
    rpc.init_rpc(f"w{rank}", rank=rank, world_size=ws, rpc_backend_options=opts)
    return rank, ws


def _report(rank: int, t0: float, err: BaseException | None, **extra: Any) -> None:
    res = {
        "rank": rank,
        "elapsed": round(time.monotonic() - t0, 3),
        "error": None if err is None else type(err).__name__,
        "message": "" if err is None else str(err),
        **extra,
    }
    print("RESULT " + json.dumps(res), flush=True)


def _timed_shutdown(rank: int, **extra: Any) -> None:
    """``rpc.shutdown`` with ``TPJ_SHUTDOWN_TIMEOUT`` (``default``: no argument), timed."""
    given = os.environ.get("TPJ_SHUTDOWN_TIMEOUT", "default")
    kwargs = {} if given == "default" else {"timeout": float(given)}
    t0 = time.monotonic()
    try:
        rpc.shutdown(**kwargs)
    except Exception as e:
        _report(rank, t0, e, **extra)
    else:
        _report(rank, t0, None, **extra)


def _shorten_pings() -> None:
    """The default (liveness-bounded) wait with ``TPJ_PING`` = "every,timeout" seconds."""
    if "TPJ_PING" in os.environ:
        every, timeout = (float(v) for v in os.environ["TPJ_PING"].split(","))
        _shutdown.RPC_SHUTDOWN_PING_EVERY_S = every
        _shutdown.RPC_SHUTDOWN_PING_TIMEOUT_S = timeout


def long_worker() -> None:
    """Rank 1 keeps working (``TPJ_WORK_S``) while rank 0 waits in a default shutdown."""
    rank, _ = _init()
    _shorten_pings()
    if rank == 1:
        time.sleep(float(os.environ["TPJ_WORK_S"]))
    _timed_shutdown(rank)


def pid() -> int:
    return os.getpid()


def served_in_flight() -> int:
    """Requests this worker is serving now (this call included)."""
    return rpc.get_debug_info()["num_inflight_served"]


def sleep(s: float) -> float:
    time.sleep(s)
    return s


def _raw_link(to: int) -> Any:
    """A connection to rank ``to`` that is not a worker: it only holds the job secret."""
    agent = _agent.current_agent()
    assert agent is not None
    cbs = {
        "on_message": lambda link, msg: None,
        "on_malformed": lambda link, err: None,
        "on_closed": lambda link, reason: None,
    }
    secret = agent.connections.site.secret
    local = agent.peers.entry(to).get("local")
    if agent.connections.get("local") is not None and local is not None:
        from tensorplay_jax.rpc._link import Inbound
        from tensorplay_jax.rpc._socket import ClientEnd

        end = ClientEnd(peer=f"w{to}", me="raw", secret=secret, inbound=Inbound(**cbs))
        return _local.connect_local(local[1], end)
    return _grpc.connect(agent.peers.address(to), peer=f"w{to}", secret=secret, me="raw", **cbs)


def fetch_then_disconnect() -> None:
    """An authenticated non-worker FETCHes an id never created, then hangs up; both stop."""
    rank, _ = _init()
    if rank == 1:
        link = _raw_link(0)
        link.send(_codec.dumps_small([_protocol.FETCH, 1, {}, NEVER_CREATED]), b"\xc0", [])
        # The owner holds the fetch (it may be a creation still on its way) ...
        wait_until(lambda: rpc.rpc_sync("w0", served_in_flight) >= 2, 20, "fetch held by w0")
        link.close()  # ... until its requester is gone
    _timed_shutdown(rank)


def fetch_never_created() -> None:
    """A worker FETCHes an id never created with no limit of its own: the owner's
    rpc_timeout ends the wait with an error naming the id."""
    rank, _ = _init(rpc_timeout=float(os.environ["TPJ_RPC_TIMEOUT"]))
    extra: dict[str, Any] = {}
    if rank == 1:
        agent = _agent.current_agent()
        assert agent is not None
        t0 = time.monotonic()
        fut = agent.call(agent.peers.by_id[0], _protocol.FETCH, timeout=0, extra=(NEVER_CREATED,))
        try:
            fut.wait(timeout=float(os.environ["TPJ_FETCH_WAIT"]))
            extra["fetch"] = "returned"
        except Exception as e:
            extra["fetch"] = f"{type(e).__name__}: {e}"
        extra["fetch_s"] = round(time.monotonic() - t0, 3)
    _timed_shutdown(rank, **extra)


def frozen_peer() -> None:
    """One rank stops rank ``TPJ_FROZEN`` (SIGSTOP: alive, unresponsive) and shuts down."""
    rank, _ = _init()
    frozen = int(os.environ["TPJ_FROZEN"])
    if rank == frozen:
        time.sleep(120)  # stopped, then killed, by the other rank
        rpc.shutdown()
        return
    _shorten_pings()
    victim = rpc.rpc_sync(f"w{frozen}", pid)
    os.kill(victim, signal.SIGSTOP)
    try:
        _timed_shutdown(rank)
    finally:
        os.kill(victim, signal.SIGKILL)


def exit_with_frozen_store() -> None:
    """Rank 1 stops rank 0 (the store's host), then leaves without calling shutdown: the
    interpreter's exit (our exit hook included) must still end."""
    rank, _ = _init()
    if rank == 0:
        time.sleep(120)  # stopped, then killed, by rank 1
        return
    victim = rpc.rpc_sync("w0", pid)
    os.kill(victim, signal.SIGSTOP)
    t0 = time.monotonic()

    def after_rpc_exit_hook() -> None:  # atexit runs after threading's exit hooks
        os.kill(victim, signal.SIGKILL)
        _report(rank, t0, None)

    atexit.register(after_rpc_exit_hook)


def exit_with_call_stuck() -> None:
    """Rank 0 serves a call that never ends; shutdown gives up, and the process still exits."""
    rank, _ = _init()
    if rank == 1:
        fut = rpc.rpc_async("w0", sleep, args=(3600,), timeout=1)
        with contextlib.suppress(rpc.RpcTimeoutError):
            fut.wait()
    t0 = time.monotonic()
    _timed_shutdown(rank)

    def at_exit() -> None:
        _report(rank, t0, None, phase="exit")

    atexit.register(at_exit)
