"""Large arrays: chunked streaming with no size limit, and bounded extra memory."""

from __future__ import annotations

import pytest

from tests.rpc._scripts import script

LARGE = script(
    """
    mib = int(os.environ["TPJ_MIB"])
    rpc.init_rpc(f"w{rank}", rank=rank, world_size=ws)
    if rank == 0:
        x = (np.arange(mib << 20, dtype=np.uint32) % 251).astype(np.uint8)
        base1 = rpc.rpc_sync("w1", T.maxrss_mib)
        y = rpc.rpc_sync("w1", T.identity, args=(x,), timeout=0)
        assert y.shape == x.shape and y.dtype == x.dtype and np.array_equal(x, y)
        peak1 = rpc.rpc_sync("w1", T.maxrss_mib)
        # the callee held one received copy; allow about 2x the payload over its baseline
        assert peak1 - base1 <= 2.2 * mib, (base1, peak1)
        del y
        z = rpc.rpc_sync("w1", T.identity, args=(jnp.asarray(x[: 64 << 20]),), timeout=0)
        assert isinstance(z, type(jnp.asarray(x[:1]))) and int(z[-1]) == int(x[(64 << 20) - 1])
        print("LARGE-OK", base1, peak1)
    rpc.shutdown()
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["local", "grpc"])
def test_one_gib_round_trip(workers, transport):
    env = {"TPJ_MIB": "1024", "TENSORPLAY_JAX_RPC_LOCAL": "1" if transport == "local" else "0"}
    res = workers(LARGE, 2, timeout=280, env=env)
    assert "LARGE-OK" in res[0].stdout, res[0]
