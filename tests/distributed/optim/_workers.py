"""Worker code for the distributed.optim tests: each function runs in every rank."""

from __future__ import annotations

import threading

import jax.numpy as jnp
import numpy as np
import optax

import tensorplay_jax as tp
import tensorplay_jax.distributed.autograd as dist_autograd
from tensorplay_jax.distributed import rpc
from tensorplay_jax.distributed.nn import RemoteModule
from tensorplay_jax.distributed.optim import DistributedOptimizer
from tests._worker import expect, init_rpc, npa, rank_and_world_size
from tests.distributed.nn import _targets as NT
from tests.distributed.optim import _targets as T
from tests.distributed.optim._cases import OPTIMIZERS, local_steps


def optimizer() -> None:
    rank = rank_and_world_size()[0]
    init_rpc("worker")
    if rank == 0:
        tp.manual_seed(0)
        x = tp.randn(6, 4)

        def values(rrefs):
            return [jnp.asarray(npa(r.to_here())) for r in rrefs]

        def grads(ctx, m1, m2, local):
            g1 = rpc.rpc_sync("worker1", NT.grads_of, args=(ctx, m1.remote_parameters()))
            g2 = rpc.rpc_sync("worker2", NT.grads_of, args=(ctx, m2.remote_parameters()))
            return [jnp.asarray(g) for g in g1 + g2 + [dist_autograd.get_gradients(ctx)[local]]]

        # parity: params on worker1, worker2 and here; two steps (state carries over)
        for name, make in sorted(OPTIMIZERS.items()):
            m1 = RemoteModule("worker1", tp.nn.Linear, (4, 3))
            m2 = RemoteModule("worker2", tp.nn.Linear, (3, 2))
            local = tp.nn.Parameter(tp.randn(2).value)
            rrefs = m1.remote_parameters() + m2.remote_parameters() + [rpc.RRef(local)]
            opt = DistributedOptimizer(make(), rrefs)
            start = values(rrefs)
            seen = []
            for _ in range(2):
                with dist_autograd.context() as ctx:
                    out = m2(m1(x).tanh()) + local
                    dist_autograd.backward(ctx, [(out * out).sum()])
                    seen.append(grads(ctx, m1, m2, local))
                    opt.step(ctx)
            want = local_steps(make(), start, seen)
            for got, w in zip(values(rrefs), want, strict=True):
                np.testing.assert_allclose(
                    np.asarray(got), np.asarray(w), rtol=2e-6, atol=1e-7, err_msg=name
                )
            assert all(
                float(jnp.abs(s - g).max()) > 1e-4
                for s, g in zip(start, values(rrefs), strict=False)
            )

        # parameters without a gradient in the context stay unchanged (on a touched owner
        # and on an owner the forward never reached)
        m1 = RemoteModule("worker1", tp.nn.Linear, (4, 3))
        idle1 = RemoteModule("worker1", tp.nn.Linear, (2, 2))
        idle2 = RemoteModule("worker2", tp.nn.Linear, (2, 2))
        rrefs = m1.remote_parameters() + idle1.remote_parameters() + idle2.remote_parameters()
        opt = DistributedOptimizer(optax.adam(0.1), rrefs)
        before = values(rrefs)
        with dist_autograd.context() as ctx:
            dist_autograd.backward(ctx, [m1(x).sum()])
            opt.step(ctx)
        after = values(rrefs)
        assert all(
            float(jnp.abs(a - b).max()) > 0 for a, b in zip(before[:2], after[:2], strict=False)
        )
        for a, b in zip(before[2:], after[2:], strict=False):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))

        # concurrent steps on one owner are serialised: 12 threads, 12 contexts, plain SGD
        m = RemoteModule("worker1", tp.nn.Linear, (4, 3))
        prefs = m.remote_parameters()
        opt = DistributedOptimizer(optax.sgd(0.01), prefs)
        w0, b0 = values(prefs)
        errors = []

        def one_step():
            try:
                with dist_autograd.context() as c:
                    dist_autograd.backward(c, [m(tp.ones(2, 4)).sum()])
                    opt.step(c)
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)

        threads = [threading.Thread(target=one_step) for _ in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        w1, b1 = values(prefs)
        # d(sum(x W^T + b))/db = batch size 2 per step, independent of W: no update may be lost
        np.testing.assert_allclose(np.asarray(b1), np.asarray(b0) - 12 * 0.01 * 2, rtol=1e-5)
        np.testing.assert_allclose(np.asarray(w1), np.asarray(w0) - 12 * 0.01 * 2, rtol=1e-5)

        # the optimizer travels over RPC: another worker steps the same owner-side state
        m = RemoteModule("worker1", tp.nn.Linear, (4, 3))
        prefs = m.remote_parameters()
        opt = DistributedOptimizer(optax.sgd(0.5, momentum=0.9), prefs)
        _, b0 = values(prefs)
        assert rpc.rpc_sync("worker2", T.train_one, args=(m, opt, tp.ones(1, 4)))
        with dist_autograd.context() as ctx:
            dist_autograd.backward(ctx, [m(tp.ones(1, 4)).sum()])
            opt.step(ctx)
        _, b2 = values(prefs)
        # momentum: step 1 moves by 0.5, step 2 by 0.5 * (0.9 + 1)
        np.testing.assert_allclose(np.asarray(b2), np.asarray(b0) - 0.5 - 0.5 * 1.9, rtol=1e-5)
        assert "worker1" in repr(opt)

        # errors on an owner re-raise here, naming the worker
        m = RemoteModule("worker2", tp.nn.Linear, (4, 3))
        opt = DistributedOptimizer(T.failing_transform(), m.remote_parameters())
        with dist_autograd.context() as ctx:
            dist_autograd.backward(ctx, [m(x).sum()])
            e = expect(
                RuntimeError,
                ["Error running optimizer on worker worker2:", "update exploded"],
                opt.step,
                ctx,
            )
            assert isinstance(e.__cause__, ValueError)
        expect(
            RuntimeError,
            [
                "Error running optimizer on worker worker2:",
                "Could not find autograd context with id",
            ],
            opt.step,
            12345,
        )
        expect(TypeError, ["context_id must be the int"], opt.step, "ctx")
        expect(TypeError, ["optax.GradientTransformation"], DistributedOptimizer, 0.1, prefs)
        expect(TypeError, ["params_rref is empty"], DistributedOptimizer, optax.sgd(0.1), [])
        expect(
            TypeError,
            ["must hold RRefs", "Tensor"],
            DistributedOptimizer,
            optax.sgd(0.1),
            [tp.ones(2)],
        )
        expect(
            RuntimeError,
            ["Error creating optimizer on worker worker1:", "not a Tensor"],
            DistributedOptimizer,
            optax.sgd(0.1),
            [rpc.remote("worker1", NT.not_a_module)],
        )
        print("OPTIMIZER_OK", flush=True)
    rpc.shutdown()
