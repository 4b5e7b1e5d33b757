"""Gradients over RPC equal ``jax.grad`` of the same function run locally, for every issue-4 case.

One job of four workers per transport, driven from this process (``w0``, through
``tensorplay_jax.testing.Workers``): every case of ``_targets.CASES`` plus the
RRef-held parameter, checked twice. ``check_case`` checks the semantics: each
leaf's gradient against the case's own oracle, no entry for anything else,
``.grad`` untouched. ``check_dist_grads`` checks every leaf against ``jax.grad``
of the case run in one process and against finite differences.
"""

from __future__ import annotations

import jax
import pytest

from tensorplay_jax import Tensor
from tensorplay_jax.distributed import rpc
from tensorplay_jax.testing import Workers, check_dist_grads
from tests.distributed.autograd import _targets as T
from tests.rpc._transports import env_of


@pytest.fixture(scope="module", params=["grpc", "tcp", "local"])
def job(request):
    # grpc: real gRPC on loopback; tcp: the TCP link between hosts; local: the same-host
    # Unix-socket/shared-memory transport (tests/rpc/_transports.py). This process is w0,
    # so it takes the transport's environment too, and float64 for the mixed-dtype case.
    env = env_of(request.param, JAX_ENABLE_X64="1")
    x64 = jax.config.jax_enable_x64
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        jax.config.update("jax_enable_x64", True)
        workers = Workers(4, names=["w0", "w1", "w2", "w3"], timeout=120, env=env)
        try:
            yield workers.start()
        finally:
            try:
                workers.close()
            finally:
                jax.config.update("jax_enable_x64", x64)


@pytest.mark.parametrize("case", T.CASES, ids=lambda c: c.name)
def test_case_matches_jax_grad(job, case):
    T.check_case(case)


@pytest.mark.parametrize("case", T.CASES, ids=lambda c: c.name)
def test_case_under_check_dist_grads(job, case):
    # the leaves created with requires_grad=False stay constants (closed over)
    fixed = {n: Tensor(case.leaves[n]) for n in case.no_grad}
    checked = {n: x for n, x in case.leaves.items() if n not in case.no_grad}
    check_dist_grads(lambda v: case.fn({**v, **fixed}, T.rpc_call, False), (checked,))


def test_rref_held_parameter(job):
    T.check_rref_case()
    rref = rpc.remote("w2", T.make_param, args=(5,))

    def loss(p, x):
        fetched = p.to_here()
        return (rpc.rpc_sync("w2", T.use_param, args=(p, x)) * fetched).sum() + (
            fetched * fetched
        ).sum()

    check_dist_grads(loss, (rref, T._r(30, 4)))
