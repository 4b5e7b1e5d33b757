"""Worker code for the multi-host collectives test: runs in every process (``tests._procs``).

Its imports stay inside the function: ``jax.distributed.initialize`` comes first. The
processes save what they computed; the test compares it with the numpy reference.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests._worker import rank_and_world_size, report


def all_collectives() -> None:
    """Every case's output and input gradient (cotangent: rng(1) normals) on this process's
    shards, saved to ``TPJ_OUT/rank{r}.npz`` (NaN where another process holds the shard)."""
    import jax

    rank, world = rank_and_world_size()
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=f"127.0.0.1:{os.environ['MASTER_PORT']}",
        num_processes=world,
        process_id=rank,
        initialization_timeout=60,
    )
    from tensorplay_jax.runtime import cross_process

    cross_process.apply()  # as a script calling jax.distributed.initialize itself does
    import numpy as np
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    from tests.collectives._cases import CASES
    from tests.collectives.test_values_and_gradients import inputs

    n = jax.device_count()
    mesh = jax.make_mesh((n,), ("i",), axis_types=(AxisType.Auto,))
    sharding = NamedSharding(mesh, P("i"))

    def global_array(a):
        return jax.make_array_from_callback(a.shape, sharding, lambda idx: a[idx])

    def local(arr) -> np.ndarray:
        """The global array with this process's shards filled in, NaN elsewhere."""
        out = np.full(arr.shape, np.nan)
        for shard in arr.addressable_shards:
            out[shard.index] = np.asarray(shard.data)
        return out

    got = {}
    for case in CASES:
        x64 = inputs(case, (n, *case.in_shape(n)))
        fn = case.fn(n)
        f = jax.jit(
            jax.shard_map(
                lambda x: fn(x[0], "i")[None],  # noqa: B023
                mesh=mesh,
                in_specs=P("i"),
                out_specs=P("i"),
            )
        )
        y, vjp = jax.vjp(f, global_array(x64.astype(np.float32)))
        ct = np.random.default_rng(1).standard_normal(y.shape)
        (g,) = vjp(global_array(ct.astype(np.float32)))
        got[f"{case.name}/value"] = local(y)
        got[f"{case.name}/grad"] = local(g)
    np.savez(Path(os.environ["TPJ_OUT"]) / f"rank{rank}.npz", **got)
    report(devices=n, local_devices=jax.local_device_count())
    jax.distributed.shutdown()
