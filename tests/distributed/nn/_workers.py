"""Worker code for the distributed.nn tests: each function runs in every rank."""

from __future__ import annotations

import numpy as np

import tensorplay_jax as tp
from tensorplay_jax.distributed import rpc
from tensorplay_jax.distributed.nn import RemoteModule
from tests._worker import expect, init_rpc, npa, rank_and_world_size
from tests.distributed.nn import _targets as T


def remote_module() -> None:
    rank = rank_and_world_size()[0]
    init_rpc("worker")
    if rank == 0:
        tp.manual_seed(0)
        # the seed example, with only its imports changed
        remote_linear = RemoteModule("worker1/cpu", tp.nn.Linear, args=(16, 8))
        x = tp.randn(4, 16)
        out = remote_linear(x)  # runs on worker1
        param_rrefs = remote_linear.remote_parameters()  # RRefs, not arrays
        module_rref = remote_linear.get_module_rref()
        assert isinstance(out, tp.Tensor) and out.shape == (4, 8), out
        assert all(isinstance(r, rpc.RRef) for r in param_rrefs) and len(param_rrefs) == 2
        assert {r.owner_name() for r in param_rrefs} == {"worker1"}
        assert module_rref.owner_name() == "worker1" and not module_rref.is_owner()
        w, b = (r.to_here() for r in param_rrefs)
        assert w.shape == (8, 16) and b.shape == (8,)
        np.testing.assert_allclose(npa(out), npa(x) @ npa(w).T + npa(b), rtol=1e-5, atol=1e-5)
        assert remote_linear.on == rpc.get_worker_info("worker1") and remote_linear.device == "cpu"
        assert repr(remote_linear) == "RemoteModule(on='worker1', device='cpu')"
        assert isinstance(remote_linear, tp.nn.Module)

        # kwargs to the constructor and to forward; forward_async; rank:N; no device part
        rm = RemoteModule("rank:1", T.Scaled, args=(3, 2), kwargs={"scale": 2.0})
        assert rm.on.name == "worker1" and rm.device == "cpu"
        x3 = tp.ones(5, 3)
        y0 = rm(x3)
        y1 = rm.forward(x3, shift=10.0)
        y2 = rm.forward_async(x3, shift=1.0).wait()
        np.testing.assert_allclose(npa(y1), npa(y0) + 10.0, rtol=1e-6)
        np.testing.assert_allclose(npa(y2), npa(y0) + 1.0, rtol=1e-6)
        assert rm.module_rref.rpc_sync().count() == 3
        futs = [rm.forward_async(x3, shift=float(i)) for i in range(6)]
        for i, f in enumerate(futs):
            np.testing.assert_allclose(npa(f.wait()), npa(y0) + i, rtol=1e-6)
        assert len(rm.remote_parameters()) == 2 and len(rm.remote_parameters(recurse=False)) == 0

        # train / eval switch the remote module
        assert rm.training and rm.module_rref.rpc_sync().mode() is True
        assert rm.eval() is rm and not rm.training
        assert rm.module_rref.rpc_sync().mode() is False
        rm.train()
        assert rm.training and rm.module_rref.rpc_sync().mode() is True
        expect(ValueError, ["boolean"], rm.train, "yes")

        # a second handle on the same module
        twin = RemoteModule.init_from_module_rref("worker1/cpu", rm.get_module_rref())
        before = twin.module_rref.rpc_sync().count()
        np.testing.assert_allclose(npa(twin(x3)), npa(y0), rtol=1e-6)
        assert rm.module_rref.rpc_sync().count() == before + 1
        assert twin.training
        expect(
            ValueError,
            ["names worker 'worker2'", "owned by 'worker1'"],
            RemoteModule.init_from_module_rref,
            "worker2/cpu",
            rm.get_module_rref(),
        )
        expect(TypeError, ["must be an RRef"], RemoteModule.init_from_module_rref, "worker1", 3)
        expect(
            TypeError,
            ["not a tensorplay_jax.nn.Module"],
            RemoteModule.init_from_module_rref,
            "worker1",
            rpc.remote("worker1", T.not_a_module),
        )

        # passed over RPC to a third worker, it works there
        y3, on, owner = rpc.rpc_sync("worker2", T.call_remote_module, args=(rm, x3))
        np.testing.assert_allclose(npa(y3), npa(y0) + 1.0, rtol=1e-6)
        assert (on, owner) == ("worker1", "worker1")
        # ... and comes back as a working handle
        back = rpc.rpc_sync("worker2", T.identity, args=(rm,))
        assert isinstance(back, RemoteModule) and back.module_rref.owner_name() == "worker1"
        np.testing.assert_allclose(npa(back(x3)), npa(y0), rtol=1e-6)

        # methods that would touch local state
        for name in (
            "to",
            "cuda",
            "cpu",
            "float",
            "double",
            "type",
            "register_buffer",
            "register_parameter",
            "add_module",
            "apply",
            "state_dict",
            "load_state_dict",
            "named_parameters",
            "buffers",
            "children",
            "modules",
            "zero_grad",
            "requires_grad_",
            "register_forward_hook",
            "register_forward_pre_hook",
            "register_backward_hook",
            "named_modules",
        ):
            expect(
                ValueError,
                [f"Method `{name}` not supported for RemoteModule"],
                getattr(rm, name),
                None,
            )
        expect(
            ValueError,
            [
                "Method `parameters` not supported for RemoteModule. "
                "Please use `remote_parameters` instead."
            ],
            rm.parameters,
        )

        # module_cls that does not build a Module
        expect(
            TypeError,
            ["built a list, not a tensorplay_jax.nn.Module"],
            RemoteModule,
            "worker1/cpu",
            T.not_a_module,
        )
        expect(TypeError, ["module_cls=3 is not callable"], RemoteModule, "worker1", 3)
        expect(TypeError, ["kwargs must be a dict"], RemoteModule, "worker1", T.Scaled, (1, 1), 5)
        expect(
            ValueError,
            ["unknown destination worker name 'nobody'"],
            RemoteModule,
            "nobody/cpu",
            tp.nn.Linear,
            (1, 1),
        )
        expect(
            RuntimeError,
            ["worker 'worker1' has no device 'cuda:0'"],
            RemoteModule,
            "worker1/cuda:0",
            tp.nn.Linear,
            (1, 1),
        )
        expect(ValueError, ["unknown device type 'xpu'"], RemoteModule, "worker1/xpu", T.Scaled)
        expect(ValueError, ["unknown destination worker rank 7"], RemoteModule, "rank:7", T.Scaled)
        assert RemoteModule("worker1/cpu:0", tp.nn.Linear, (1, 1)).device == "cpu:0"
        expect(
            RuntimeError,
            ["has no device 'cpu:3'", "cpu:0"],
            RemoteModule,
            "worker1/cpu:3",
            tp.nn.Linear,
            (1, 1),
        )

        # interfaces: checked at construction; declared methods callable on the handle
        ri = RemoteModule("worker1/cpu", T.Scaled, (3, 2), module_interface_cls=T.ScaledInterface)
        assert ri.generated_methods == ("forward", "project", "count", "add_scale")
        ri(x3)
        assert ri.count() == 1 and ri.count_async().wait() == 1
        assert ri.add_scale(0.5) == 1.5 and ri.add_scale_async(0.5).wait() == 2.0
        legacy = RemoteModule("worker1", T.Scaled, (3, 2), _module_interface_cls=T.ScaledInterface)
        assert legacy.count() == 0
        expect(AttributeError, ["no attribute 'mode'", "count_async"], getattr, ri, "mode")
        expect(AttributeError, ["no attribute 'count'"], getattr, rm, "count")
        expect(
            TypeError,
            ["does not implement method `reset`", "NeedsReset"],
            RemoteModule,
            "worker1",
            T.Scaled,
            (3, 2),
            module_interface_cls=T.NeedsReset,
        )
        expect(
            TypeError,
            ["has no parameter 'gamma'", "WrongArgs.forward"],
            RemoteModule,
            "worker1",
            T.Scaled,
            (3, 2),
            module_interface_cls=T.WrongArgs,
        )
        expect(
            TypeError,
            ["is not an interface", "@tensorplay_jax.distributed.nn.api.interface"],
            RemoteModule,
            "worker1",
            T.Scaled,
            (3, 2),
            module_interface_cls=T.Scaled,
        )
        expect(
            TypeError,
            ["does not implement method `reset`"],
            RemoteModule.init_from_module_rref,
            "worker1",
            rm.get_module_rref(),
            T.NeedsReset,
        )

        # differentiable under distributed autograd; parameter gradients land on the owner
        import tensorplay_jax.distributed.autograd as dist_autograd

        tp.manual_seed(1)
        g = RemoteModule(
            "worker1/cpu",
            T.Scaled,
            (3, 2),
            kwargs={"scale": 2.0},
            module_interface_cls=T.ScaledInterface,
        )
        prefs = g.remote_parameters()
        w, b = (r.to_here() for r in prefs)
        xg = tp.randn(5, 3, requires_grad=True)
        with dist_autograd.context() as ctx:
            y = g(xg, shift=1.0)
            y2 = g.forward_async(xg).wait()
            loss = (y * y).sum() + y2.sum()
            dist_autograd.backward(ctx, [loss])
            gw, gb = rpc.rpc_sync("worker1", T.grads_of, args=(ctx, prefs))
            gx = dist_autograd.get_gradients(ctx)[xg]
        local = T.Scaled(3, 2, scale=2.0)
        local.load_state_dict({"fc.weight": w, "fc.bias": b})
        xl = tp.tensor(npa(xg), requires_grad=True)
        yl = local(xl, shift=1.0)
        ((yl * yl).sum() + local(xl).sum()).backward()
        np.testing.assert_allclose(gw, npa(local.fc.weight.grad), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(gb, npa(local.fc.bias.grad), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(npa(gx), npa(xl.grad), rtol=1e-5, atol=1e-6)
        assert rpc.rpc_sync("worker1", T.local_grads, args=(prefs,)) == [None, None]
        # a second context does not see the first one's gradients; gradients accumulate within one
        with dist_autograd.context() as ctx2:
            dist_autograd.backward(ctx2, [g(xg).sum()])
            dist_autograd.backward(ctx2, [g(xg).sum()])
            _gw2, gb2 = rpc.rpc_sync("worker1", T.grads_of, args=(ctx2, prefs))
        np.testing.assert_allclose(gb2, np.full(2, 2 * 2.0 * 5), rtol=1e-6)
        # a twin handle and a third worker's handle train the same parameters
        twin = RemoteModule.init_from_module_rref("worker1", g.get_module_rref())
        with dist_autograd.context() as ctx3:
            dist_autograd.backward(ctx3, [twin(xg).sum()])
            _, gb3 = rpc.rpc_sync("worker1", T.grads_of, args=(ctx3, prefs))
        np.testing.assert_allclose(gb3, np.full(2, 2.0 * 5), rtol=1e-6)
        # a declared method (with a keyword argument) is differentiable too
        with dist_autograd.context() as ctx5:
            dist_autograd.backward(ctx5, [g.project(xg, bias=False).sum()])
            gw5, gb5 = rpc.rpc_sync("worker1", T.grads_of, args=(ctx5, prefs))
            gx5 = dist_autograd.get_gradients(ctx5)[xg]
        assert gb5 is None
        np.testing.assert_allclose(gw5, np.tile(npa(xg).sum(0), (2, 1)), rtol=1e-5)
        np.testing.assert_allclose(npa(gx5), np.tile(npa(w).sum(0), (5, 1)), rtol=1e-5)
        gw4, gb4 = rpc.rpc_sync("worker2", T.backward_on_third, args=(g, tp.ones(5, 3)))
        np.testing.assert_allclose(gb4, np.full(2, 2.0 * 5), rtol=1e-6)
        np.testing.assert_allclose(gw4, np.full((2, 3), 2.0 * 5), rtol=1e-6)
        print("REMOTE_MODULE_OK", flush=True)
    rpc.shutdown()
