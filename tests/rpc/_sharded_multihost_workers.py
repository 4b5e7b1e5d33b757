"""Worker code for the multi-controller sharded-array test: runs in every process.

Its imports stay inside the function: ``jax.distributed.initialize`` comes first.
"""

from __future__ import annotations

import operator
import os

from tests._worker import rank_and_world_size, report


def send_a_global_array() -> None:
    """Rank 0 sends an array sharded over both processes' devices (refused), then a
    plain call; it reports the error and the plain call's result."""
    import jax

    rank, world = rank_and_world_size()
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=f"127.0.0.1:{os.environ['MASTER_PORT']}",
        num_processes=world,
        process_id=rank,
        initialization_timeout=60,
    )
    n = jax.device_count()  # every process starts its backend: they start together
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from tensorplay_jax.distributed import rpc

    rpc.init_rpc(f"w{rank}", rank=rank, world_size=world,
                 rpc_backend_options=rpc.TensorPipeRpcBackendOptions(
                     init_method=f"tcp://127.0.0.1:{os.environ['TPJ_RPC_PORT']}",
                     rpc_timeout=60))  # fmt: skip
    if rank == 0:
        mesh = jax.make_mesh((n,), ("i",))
        a = np.arange(8, dtype=np.float32)
        x = jax.make_array_from_callback(a.shape, NamedSharding(mesh, P("i")), lambda i: a[i])
        try:
            rpc.rpc_sync("w1", operator.neg, args=(x,))
            error = None
        except ValueError as e:
            error = str(e)
        report(error=error, next=rpc.rpc_sync("w1", operator.add, args=(1, 2)))
    rpc.shutdown()
