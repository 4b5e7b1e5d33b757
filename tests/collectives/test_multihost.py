"""All ten collectives across 2 real OS processes: ``jax.distributed.initialize``, CPU
collectives over gloo, one global mesh of 4 devices (2 per process).

One job computes every case; each process saves its own shards of the output and of
the input gradient. The test joins the shards and checks them against the numpy
reference and its dense (finite-difference) Jacobian, one test per case.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests._procs import reported, run_workers
from tests.collectives import _multihost_workers as W
from tests.collectives._cases import CASE_IDS, CASES
from tests.collectives._harness import numeric_jacobian, oracle
from tests.collectives.test_values_and_gradients import inputs

N = 4  # devices: 2 processes with 2 each


@pytest.fixture(scope="module")
def computed(tmp_path_factory) -> dict[str, np.ndarray]:
    """Each case's output and gradient, the two processes' shards joined."""
    out = tmp_path_factory.mktemp("multihost")
    res = run_workers(W.all_collectives, 2, devices_per_process=2, timeout=500,
                      env={"TPJ_OUT": str(out)})  # fmt: skip
    for r in res:
        assert reported(r) == {"devices": N, "local_devices": 2}, str(r)
    parts = [np.load(out / f"rank{r}.npz") for r in range(2)]
    joined = {}
    for key in parts[0].files:
        a, b = parts[0][key], parts[1][key]
        assert np.all(np.isnan(a) != np.isnan(b)), f"{key}: each shard on exactly one process"
        joined[key] = np.where(np.isnan(a), b, a)
    return joined


@pytest.mark.timeout(600)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_collective_across_two_processes(computed, case):
    x64 = inputs(case, (N, *case.in_shape(N)))
    ref = oracle(case.ref(N), "shard_map-jit")
    y_ref = ref(x64)
    tol = dict(rtol=2e-4, atol=2e-4)
    np.testing.assert_allclose(computed[f"{case.name}/value"], y_ref, **tol)
    ct = np.random.default_rng(1).standard_normal(y_ref.shape)
    want = (numeric_jacobian(ref, x64).T @ ct.ravel()).reshape(x64.shape)
    np.testing.assert_allclose(computed[f"{case.name}/grad"], want, **tol)
