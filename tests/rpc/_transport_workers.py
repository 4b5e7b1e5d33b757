"""Worker code for test_transports: a transport added by one module and one registration.

``CountingTransport`` is the TCP link, counting the connections it makes. Every
worker imports this module (it runs these functions), so the registration at
the bottom happens in every process before ``init_rpc``, as a user's would.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from tensorplay_jax.distributed import rpc
from tensorplay_jax.rpc._link import Link
from tensorplay_jax.rpc.transports import register_transport, registered_transport
from tests._worker import init_rpc
from tests.rpc import _targets as T

RESULT = "RESULT "  # the line a worker prints its observations on, as JSON


class CountingTransport(registered_transport("tcp")):  # type: ignore[misc]
    """The TCP link, counting the connections it makes."""

    connects = 0

    def connect(self, peer: str, entry: Any) -> Link:
        CountingTransport.connects += 1
        return super().connect(peer, entry)


register_transport("counting", CountingTransport)


def counted_calls() -> None:
    """Each worker calls the other through "counting" (gRPC second); prints what it saw."""
    opts = rpc.GrpcRpcBackendOptions(transports=["counting", "grpc"])
    rank, _ = init_rpc(rpc_backend_options=opts)
    from tensorplay_jax.rpc import _agent

    agent = _agent.current_agent()
    other = f"w{1 - rank}"
    sums = [rpc.rpc_sync(other, T.add, args=(rank, i)) for i in range(5)]
    big = np.arange(1 << 18, dtype=np.float32)  # larger than a socket read buffer
    back = rpc.rpc_async(other, T.identity, args=(big,)).wait()
    link = agent.peers.links[1 - rank]
    seen = {
        "sums": sums,
        "big_back": bool(np.array_equal(back, big)),
        "served": [name for name, _ in agent.connections.transports],
        "link": type(link).__name__,
        "connects": CountingTransport.connects,
        "advertised": sorted(agent.connections.advertised()),
    }
    print(RESULT + json.dumps(seen), flush=True)
    rpc.shutdown()
