"""Worker bodies for the rendezvous and secret tests (run by ``tests._procs.run_workers``)."""

from __future__ import annotations

import json
import os
import pathlib
import time

from tensorplay_jax.distributed import rpc
from tests._worker import report
from tests.rpc import _targets as T


def _rank() -> int:
    return int(os.environ["RANK"])


def _wait_for(path: pathlib.Path, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} did not appear within {timeout} s"
        time.sleep(0.05)


def _publish(path: pathlib.Path, obj: object) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj))
    tmp.rename(path)


def outsider_target_job() -> None:
    """Two real workers an outsider (the test process) attacks; they must keep serving
    (each reports, once the outsider is done, what one call to the other returned).

    Rank 1 joins only once the outsider has probed the store (``store-probed``),
    so the probe runs while rank 0 waits in the rendezvous, the rank-1 key free.
    ``TPJ_STORE_AUTH_TIMEOUT`` (seconds), when set, is how long the store waits for a
    connection to prove the secret: each probe that never does lasts that long.
    """
    from tensorplay_jax.rpc import _agent, _rendezvous

    if "TPJ_STORE_AUTH_TIMEOUT" in os.environ:
        _rendezvous.RPC_STORE_AUTH_TIMEOUT_S = float(os.environ["TPJ_STORE_AUTH_TIMEOUT"])
    rank = _rank()
    tmp = pathlib.Path(os.environ["TPJ_TMP"])
    if rank == 1:
        _wait_for(tmp / "store-probed")
    rpc.init_rpc(f"w{rank}", rank=rank, world_size=2)
    agent = _agent.current_agent()
    served = agent.connections.advertised()  # local: [host id, address]; tcp: [host, port]
    local = served["local"][1] if "local" in served else None
    tcp = served["tcp"][1] if "tcp" in served else None
    _publish(
        tmp / f"addr{rank}",
        {"grpc": agent.address, "local": local, "tcp": tcp, "pid": os.getpid()},
    )
    _wait_for(tmp / "outsider-done")
    other = f"w{1 - rank}"
    got = {
        "rpc_sync": rpc.rpc_sync(other, T.add, args=(rank, 10)),
        "remote": rpc.remote(other, T.add, args=(2, 3)).to_here(),
    }
    rpc.shutdown()
    report(**got)


def two_workers_ping() -> None:
    """The smallest real job: each worker calls the other once and reports the reply."""
    rank = _rank()
    rpc.init_rpc(f"w{rank}", rank=rank, world_size=int(os.environ["WORLD_SIZE"]))
    reply = rpc.rpc_sync(f"w{1 - rank}", T.add, args=(rank, 1))
    rpc.shutdown()
    report(reply=reply)


def init_expecting_error() -> None:
    """Call init_rpc; report what it raised as ``error`` (``"Type: message"``, or None)."""
    rank = _rank()
    opts = rpc.GrpcRpcBackendOptions(init_timeout=float(os.environ.get("TPJ_INIT_TIMEOUT", "60")))
    delay = float(os.environ.get("TPJ_START_DELAY", "0"))
    time.sleep(delay)
    try:
        ws = int(os.environ["WORLD_SIZE"])
        rpc.init_rpc(f"w{rank}", rank=rank, world_size=ws, rpc_backend_options=opts)
    except Exception as e:  # the test reads the message
        report(error=f"{type(e).__name__}: {e}")
        return
    report(error=None)
    rpc.shutdown()
