"""Values and first derivatives of every collective, in every mode and axis size.

Oracle: the numpy reference of each collective (``_reference.py``) and its Jacobian
as a dense matrix on the global input (central differences of the reference in
float64; exact for the linear collectives). The VJP must equal ``J.T @ ct`` and the
JVP ``J @ t``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.collectives._cases import CASE_IDS, CASES, REPRESENTATIVE
from tests.collectives._harness import MODES, global_shape, numeric_jacobian, oracle, spmd

# The axis sizes each mode runs at: a covering set rather than the full product. A mode
# changes how the program is dispatched (jit, op by op, pmap, a second mesh axis,
# check_vma off) and a size changes what the collective computes, and neither depends
# on the other. The reference mode, shard_map under jit, runs every case at every size;
# each other (mode, size) pair runs the representative cases (``_cases.REPRESENTATIVE``:
# one per collective and per non-linear rule). Op-by-op (eager) shard_map compiles each
# primitive of the forward, VJP and JVP on its own, so its pairs are the fewest. The
# second-order tests add more pairs.
REFERENCE = "shard_map-jit"
MATRIX = {
    "shard_map-jit": (1, 2, 4, 8),
    "shard_map-novma-jit": (1, 4),
    "pmap": (2, 8),
    "mesh2d-jit": (2, 4),
    "shard_map-eager": (1, 4),
    "shard_map-novma-eager": (2,),
}
assert set(MATRIX) == set(MODES), "every execution mode of the harness is in the matrix"


def inputs(case, shape, seed=0):
    rng = np.random.default_rng(seed)
    if case.name.endswith("prod"):
        return rng.uniform(0.5, 1.5, shape)
    return rng.standard_normal(shape)


def _params():
    """Every case in the reference mode; the representative cases in the others."""
    for mode, sizes in MATRIX.items():
        for n in sizes:
            for case, cid in zip(CASES, CASE_IDS, strict=True):
                if mode == REFERENCE or cid in REPRESENTATIVE:
                    yield pytest.param(case, mode, n, id=f"{mode}-n{n}-{cid}")


@pytest.mark.parametrize("case,mode,n", list(_params()))
def test_value_vjp_jvp(case, mode, n):
    shape = global_shape(mode, n, case.in_shape(n))
    x64 = inputs(case, shape)
    x = jnp.asarray(x64, jnp.float32)
    ref = oracle(case.ref(n), mode)
    f = spmd(case.fn(n), mode, n)

    y, vjp = jax.vjp(f, x)
    y_ref = ref(x64)
    np.testing.assert_allclose(np.asarray(y), y_ref, rtol=2e-5, atol=2e-5)

    jac = numeric_jacobian(ref, x64)
    rng = np.random.default_rng(1)
    ct = rng.standard_normal(y_ref.shape)
    (grad,) = vjp(jnp.asarray(ct, jnp.float32))
    np.testing.assert_allclose(np.asarray(grad).ravel(), jac.T @ ct.ravel(), rtol=2e-4, atol=2e-4)

    t = rng.standard_normal(shape)
    _, tangent = jax.jvp(f, (x,), (jnp.asarray(t, jnp.float32),))
    np.testing.assert_allclose(np.asarray(tangent).ravel(), jac @ t.ravel(), rtol=2e-4, atol=2e-4)
