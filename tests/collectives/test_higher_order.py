"""Every differentiation transform on every collective: grad, jacrev, jacfwd, hessian,
and ``jax.test_util.check_grads`` to second order in forward and reverse mode.

Oracles: the dense Jacobian of the numpy reference (central differences, float64)
for jacrev/jacfwd/grad; for the Hessian of ``sum(sin(F(x)))`` the exact
``J.T diag(-sin F) J`` for piecewise-linear collectives and central differences of
the reference's gradient for ``prod``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from tests.collectives._cases import CASE_IDS, CASES, REPRESENTATIVE
from tests.collectives._harness import global_shape, numeric_jacobian, oracle, spmd
from tests.collectives.test_values_and_gradients import inputs

# A covering set, as in test_values_and_gradients.py: the reference mode, shard_map
# under jit, runs every case; each other (mode, size) pair runs the representative cases
# (``_cases.REPRESENTATIVE``). Every mode and every size appears in one of the two lists.
JAC_PARAMS = [("shard_map-jit", 4), ("shard_map-jit", 1), ("shard_map-eager", 2), ("mesh2d-jit", 2)]
GRADS_PARAMS = [
    ("shard_map-jit", 2),
    ("shard_map-jit", 8),
    ("shard_map-novma-jit", 4),
    ("pmap", 4),
]


def _matrix(params):
    """Every case with the first (reference) pair; the representative cases with the rest."""
    for i, (mode, n) in enumerate(params):
        for case, cid in zip(CASES, CASE_IDS, strict=True):
            if i == 0 or cid in REPRESENTATIVE:
                yield pytest.param(case, mode, n, id=f"{mode}-n{n}-{cid}")


def _hessian_oracle(case, ref, x64):
    y = ref(x64)
    jac = numeric_jacobian(ref, x64)
    if not case.name.endswith("prod"):
        return jac.T @ np.diag(-np.sin(y).ravel()) @ jac
    # prod is not piecewise linear: differentiate the reference gradient numerically.
    grad_of = lambda x: numeric_jacobian(ref, x, h=1e-5).T @ np.cos(ref(x)).ravel()
    return numeric_jacobian(grad_of, x64, h=1e-4)


@pytest.mark.parametrize("case,mode,n", list(_matrix(JAC_PARAMS)))
def test_jacobians_and_hessian(case, mode, n):
    shape = global_shape(mode, n, case.in_shape(n))
    x64 = inputs(case, shape, seed=2)
    x = jnp.asarray(x64, jnp.float32)
    ref = oracle(case.ref(n), mode)
    f = spmd(case.fn(n), mode, n)
    jac = numeric_jacobian(ref, x64)
    out_shape = ref(x64).shape

    jr = np.asarray(jax.jacrev(f)(x)).reshape(jac.shape)
    jf = np.asarray(jax.jacfwd(f)(x)).reshape(jac.shape)
    np.testing.assert_allclose(jr, jac, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(jf, jac, rtol=1e-4, atol=1e-4)

    w = jnp.asarray(np.random.default_rng(3).standard_normal(out_shape), jnp.float32)
    g = jax.grad(lambda x: jnp.vdot(w, f(x)))(x)
    np.testing.assert_allclose(np.asarray(g).ravel(), jac.T @ np.asarray(w).ravel(), atol=1e-4)

    if mode.endswith("eager"):
        return  # op-by-op, a Hessian runs the same rules as under jit, one compile per primitive
    loss = lambda x: jnp.sum(jnp.sin(f(x)))
    h = np.asarray(jax.hessian(loss)(x)).reshape(x.size, x.size)
    np.testing.assert_allclose(h, _hessian_oracle(case, ref, x64), rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("case,mode,n", list(_matrix(GRADS_PARAMS)))
def test_check_grads_second_order(case, mode, n):
    shape = global_shape(mode, n, case.in_shape(n))
    x = jnp.asarray(inputs(case, shape, seed=4), jnp.float32)
    f = spmd(case.fn(n), mode, n)
    check_grads(f, (x,), order=2, modes=("fwd", "rev"), eps=1e-2, atol=3e-2, rtol=3e-2)
