"""Worker code for test_tcp: the TCP link between workers reached as other hosts are.

Every rank runs these with the same-host transport off
(``TENSORPLAY_JAX_RPC_LOCAL=0``), so the pairs talk over ``rpc/_tcp`` on loopback.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import jax.numpy as jnp
import numpy as np

from tensorplay_jax.distributed import rpc
from tests._worker import expect, init_rpc, rank_and_world_size
from tests.rpc import _targets as T

N = (1 << 20) + 13  # elements: longer than a link's read buffer, not a whole number of pages


def _arrays(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    normal = rng.standard_normal(N)
    return [
        normal.astype(np.float32),
        normal,  # float64
        rng.integers(-128, 128, N, dtype=np.int8),
        rng.integers(0, 1 << 16, (N // 7, 7), dtype=np.uint16),
        rng.random(N) < 0.5,
        (normal + 1j * rng.standard_normal(N)).astype(np.complex64),
        np.asarray(jnp.asarray(normal, dtype=jnp.bfloat16)),
        np.array([np.nan, -0.0, np.inf], dtype=np.float64),  # a small one among them
    ]


def _same(a: np.ndarray, b: object) -> bool:
    b = np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def dtypes() -> None:
    rank = rank_and_world_size()[0]
    init_rpc()
    if rank == 0:
        from tensorplay_jax.rpc import _agent

        first = _arrays(0)
        got = rpc.rpc_sync("w1", T.identity, args=(first,))
        assert type(_agent.current_agent().connections.links[1]).__name__ == "TcpLink"
        assert all(_same(a, b) for a, b in zip(first, got, strict=True))
        assert all(isinstance(b, np.ndarray) and b.flags.writeable for b in got)
        # Received buffers are reused only once no array is left on them: the first
        # answer stays intact while later ones arrive (and small calls interleave).
        later = [_arrays(s) for s in (1, 2, 3)]
        futs = [rpc.rpc_async("w1", T.identity, args=(x,)) for x in later]
        small = [rpc.rpc_async("w1", T.add, args=(i, 1)) for i in range(50)]
        assert rpc.wait_all(small) == [i + 1 for i in range(50)]
        for x, f in zip(later, futs, strict=True):
            assert all(_same(a, b) for a, b in zip(x, f.wait(), strict=True))
        assert all(_same(a, b) for a, b in zip(first, got, strict=True))
        # a jax array arrives as a jax array, exactly
        j = jnp.asarray(first[0])
        back = rpc.rpc_sync("w1", T.identity, args=(j,))
        assert isinstance(back, type(j)) and _same(first[0], back)
        print("TCP-DTYPES-OK")
    rpc.shutdown()
    print("DONE", rank)


def reply_then_die(mib: int) -> np.ndarray:
    """A reply of ``mib`` MiB; this process is killed while it is being sent."""
    x = np.ones(mib << 18, dtype=np.float32)
    threading.Timer(0.05, os.kill, args=(os.getpid(), signal.SIGKILL)).start()
    return x


def killed_mid_transfer() -> None:
    """Rank 1 dies while its long reply is on the way; rank 2 while our long request is."""
    rank = rank_and_world_size()[0]
    init_rpc(rpc_backend_options=rpc.GrpcRpcBackendOptions(rpc_timeout=60))
    if rank == 0:
        t = time.monotonic()
        expect(
            rpc.RpcPeerError,
            ["'w1'", "lost the connection"],
            rpc.rpc_sync,
            "w1",
            reply_then_die,
            args=(512,),
        )
        assert time.monotonic() - t < 20, time.monotonic() - t
        big = np.ones(512 << 18, dtype=np.float32)
        rpc.rpc_sync("w2", T.die_soon, args=(0.05,))
        t = time.monotonic()
        expect(rpc.RpcPeerError, ["'w2'", "lost the connection"], rpc.rpc_sync, "w2", T.identity,
               args=(big,))  # fmt: skip
        assert time.monotonic() - t < 20, time.monotonic() - t
        print("TCP-KILLED-OK")
    if rank in (1, 2):
        time.sleep(60)  # killed meanwhile
    rpc.shutdown()
    print("DONE", rank)
