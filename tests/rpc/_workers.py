"""Worker code for the RPC tests: each function runs in every rank (see ``tests._procs``)."""

from __future__ import annotations

import os
import time
import warnings

import numpy as np

from tensorplay_jax.distributed import rpc
from tests._worker import error_text, init_rpc, rank_and_world_size, report, wait_until
from tests.rpc import _targets as T


def after_shutdown_errors(peer: str) -> list[str | None]:
    """What ``rpc_sync`` and ``shutdown`` raise once RPC is shut down here."""
    return [error_text(rpc.rpc_sync, peer, T.add, args=(1,)), error_text(rpc.shutdown)]


def shutdown_and_report(**values: object) -> None:
    """Shut down gracefully; report the warnings it gave, what RPC says afterwards, ``values``."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rpc.shutdown()
    report(
        warnings=[str(w.message) for w in caught],
        after_shutdown=after_shutdown_errors("w0"),
        **values,
    )


def duplicate_peer() -> None:
    """Rank 1 of a job whose rank 0 takes the same name; reports the error it got."""
    rank, ws = rank_and_world_size()
    report(error=error_text(rpc.init_rpc, "same", rank=rank, world_size=ws))


def late_peer() -> None:
    """w1 returns from init_rpc 3 s after the rendezvous; w2 is a plain worker."""
    rank = rank_and_world_size()[0]
    if rank == 1:
        from tensorplay_jax.rpc import _agent

        start = _agent.Agent.start

        def late_start(self):
            start(self)
            time.sleep(3.0)  # rendezvous done, init_rpc not returned yet

        _agent.Agent.start = late_start
    init_rpc()
    shutdown_and_report()


def tls_options(certs: str) -> dict[str, object]:
    """Mutual TLS with the self-signed certificate in ``certs`` (cert.pem, key.pem)."""
    return dict(
        tls_cert_chain=f"{certs}/cert.pem",
        tls_private_key=f"{certs}/key.pem",
        tls_root_certs=f"{certs}/cert.pem",
        tls_require_client_auth=True,
    )


def tls_peer() -> None:
    """Serves over TLS (``TPJ_CERTS``) until rank 0 shuts down."""
    init_rpc(rpc_backend_options=rpc.GrpcRpcBackendOptions(**tls_options(os.environ["TPJ_CERTS"])))
    shutdown_and_report()


def transport() -> None:
    rank = rank_and_world_size()[0]
    init_rpc()
    if rank == 0:
        from tensorplay_jax.rpc import _agent
        from tensorplay_jax.rpc._socket import spinner

        x = np.arange(4 << 20, dtype=np.float32)
        assert np.array_equal(rpc.rpc_sync("w1", T.identity, args=(x,)), x)
        assert rpc.rpc_sync("w1", T.add, args=(1, 2)) == 3
        # a served call that blocks must not hold up the requests behind it on the link
        gates = [rpc.rpc_async("w1", T.wait_gate, args=(30,)) for _ in range(3)]
        time.sleep(0.2)
        rpc.rpc_sync("w1", T.open_gate, timeout=10)
        assert rpc.wait_all(gates) == [True] * 3
        report(
            link=type(_agent.current_agent().peers.links[1]).__name__,
            spins=spinner._SPIN is not None,
        )
    rpc.shutdown()


def leaving_peer() -> None:
    """Serves until it is shut down (``_targets.leave_soon``: not gracefully)."""
    init_rpc()
    wait_until(lambda: not rpc.is_initialized(), timeout=60)


# A notebook cell: run in ``__main__``, which has no file (as in a notebook or a REPL).
NOTEBOOK_CELL = """
import os, threading
RANK = int(os.environ["RANK"])
cell_lock = threading.Lock()

def cell_rank():
    return RANK

def cell_locked_rank():
    with cell_lock:
        return RANK
"""


def notebook_cells() -> dict[str, object]:
    """Run on ``w1`` (its ``__main__`` has no file): define the cell, call ``w0`` with it."""
    import __main__

    exec(compile(NOTEBOOK_CELL, "<cell>", "exec"), __main__.__dict__)  # what a notebook does
    cell_rank = __main__.cell_rank
    return {
        # No main file to compare: cell functions go by value, with the caller's globals.
        "by_value": rpc.rpc_sync("w0", __main__.cell_rank),
        "closure": rpc.rpc_sync("w0", lambda: cell_rank() + 10),  # a closure over it too
        # To this worker itself they go by name (the lock is no obstacle).
        "to_itself": rpc.rpc_sync("w1", __main__.cell_locked_rank),
        "with_a_lock": error_text(rpc.rpc_sync, "w0", __main__.cell_locked_rank),
    }
