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

from tests.collectives._cases import CASE_IDS, CASES
from tests.collectives._harness import MODES, global_shape, numeric_jacobian, oracle, spmd

SIZES = (1, 2, 4, 8)


def inputs(case, shape, seed=0):
    rng = np.random.default_rng(seed)
    if case.name.endswith("prod"):
        return rng.uniform(0.5, 1.5, shape)
    return rng.standard_normal(shape)


def _params():
    for mode in MODES:
        for n in SIZES:
            if mode.startswith("mesh2d") and n == 8:
                continue  # 8 devices: a second mesh axis of size 1 adds nothing over n=4
            yield pytest.param(mode, n, id=f"{mode}-n{n}")


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("mode,n", list(_params()))
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
