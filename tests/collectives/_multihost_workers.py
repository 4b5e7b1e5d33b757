"""Worker code for the multi-host collectives test: runs in every process (``tests._procs``).

Its imports stay inside the function: ``jax.distributed.initialize`` comes first.
"""

from __future__ import annotations

from tests._worker import rank_and_world_size


def all_collectives() -> None:
    import os

    import jax

    rank, world = rank_and_world_size()
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=f"127.0.0.1:{os.environ['MASTER_PORT']}",
        num_processes=world,
        process_id=rank,
        initialization_timeout=60,
    )
    import numpy as np
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    from tests.collectives._cases import CASES
    from tests.collectives._harness import numeric_jacobian, oracle
    from tests.collectives.test_values_and_gradients import inputs

    n = jax.device_count()
    assert n == 2 * world and jax.local_device_count() == 2, (n, jax.local_device_count())
    mesh = jax.make_mesh((n,), ("i",), axis_types=(AxisType.Auto,))
    sharding = NamedSharding(mesh, P("i"))

    def global_array(a):
        return jax.make_array_from_callback(a.shape, sharding, lambda idx: a[idx])

    def check_local(arr, want, what):
        for shard in arr.addressable_shards:
            np.testing.assert_allclose(
                np.asarray(shard.data),
                want[shard.index],
                rtol=2e-4,
                atol=2e-4,
                err_msg=f"{what} on process {rank}, shard {shard.index}",
            )

    checked = 0
    for case in CASES:
        x64 = inputs(case, (n, *case.in_shape(n)))
        ref = oracle(case.ref(n), "shard_map-jit")
        y_ref = ref(x64)
        fn = case.fn(n)
        f = jax.jit(
            jax.shard_map(
                lambda x: fn(x[0], "i")[None],  # noqa: B023
                mesh=mesh,
                in_specs=P("i"),
                out_specs=P("i"),
            )
        )
        x = global_array(x64.astype(np.float32))
        y, vjp = jax.vjp(f, x)
        check_local(y, y_ref, f"{case.name} value")
        ct = np.random.default_rng(1).standard_normal(y_ref.shape)
        (g,) = vjp(global_array(ct.astype(np.float32)))
        want = (numeric_jacobian(ref, x64).T @ ct.ravel()).reshape(x64.shape)
        check_local(g, want, f"{case.name} gradient")
        checked += 1
    print(f"process {rank}: {checked} cases OK")
    jax.distributed.shutdown()
