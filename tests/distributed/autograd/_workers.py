"""Worker code for the distributed autograd tests: each function runs in every rank."""

from __future__ import annotations

import functools
import threading
import time

import numpy as np

import tensorplay_jax as tp
import tensorplay_jax.distributed.autograd as dist_autograd
from tensorplay_jax.distributed import rpc
from tests import _worker
from tests._worker import expect, init_rpc, rank_and_world_size
from tests.distributed.autograd import _targets as T

# These workers poll at a finer grain, and give up sooner, than the prelude's default.
wait_until = functools.partial(_worker.wait_until, timeout=10.0, poll=0.02)


def seed() -> None:
    """Issue 4's seed example in one worker, after the errors before ``init_rpc``."""
    # before init_rpc: clear errors, no hang
    try:
        dist_autograd.context().__enter__()
        raise AssertionError("context() without RPC did not raise")
    except rpc.RpcNotInitializedError as e:
        assert "RPC has not been initialized" in str(e) and "init_rpc" in str(e), e
    try:
        dist_autograd.backward(1, [tp.ones(1, requires_grad=True).sum()])
        raise AssertionError("backward() without RPC did not raise")
    except rpc.RpcNotInitializedError as e:
        assert "dist_autograd.backward: RPC has not been initialized" in str(e), e
    assert dist_autograd.is_available() and not dist_autograd.is_initialized()

    rpc.init_rpc("worker", rank=0, world_size=1)

    def remote_double(t):
        return t * 2

    with dist_autograd.context() as ctx_id:
        t = tp.randn(4, requires_grad=True)
        out = rpc.rpc_sync("worker", remote_double, args=(t,))
        loss = out.sum()
        dist_autograd.backward(ctx_id, [loss])
        grads = dist_autograd.get_gradients(ctx_id)
        print(grads[t])  # [2. 2. 2. 2.]
    rpc.shutdown()
    assert not dist_autograd.is_initialized()


def seed_multi() -> None:
    """The seed example along a chain of workers: w0 -> w1 -> ... -> w{ws-1}."""
    rank, ws = rank_and_world_size()
    init_rpc("worker")

    def remote_double(t):
        return t * 2

    if rank == 0:
        with dist_autograd.context() as ctx_id:
            t = tp.randn(4, requires_grad=True)
            out = t
            for r in range(1, ws):
                out = rpc.rpc_sync(f"worker{r}", remote_double, args=(out,))
            loss = out.sum()
            dist_autograd.backward(ctx_id, [loss])
            grads = dist_autograd.get_gradients(ctx_id)
            print(grads[t])
    rpc.shutdown()


# Four workers; w0 drives the single-threaded checks, then w0-w2 run 20 threads each at once.
def semantics() -> None:
    rank = rank_and_world_size()[0]
    init_rpc()
    assert dist_autograd.is_available() and dist_autograd.is_initialized()
    if rank == 0:
        # ids: the creating worker's rank in the high 16 bits; one context per thread
        with dist_autograd.context() as c0:
            assert c0 >> 48 == 0 and c0 > 0
            expect(
                RuntimeError,
                ["Already have an autograd context id for this thread"],
                dist_autograd.context().__enter__,
            )
            other = []
            th = threading.Thread(target=lambda: other.append(dist_autograd.context().__enter__()))
            th.start()
            th.join()
            assert other and other[0] != c0
            assert dist_autograd._current_context().context_id == c0
        # callees record under the same id with no tensor; nested tensor-free hops too
        counter = rpc.remote("w3", T.plain_value, args=(5,))
        with dist_autograd.context() as cid:
            assert rpc.rpc_sync("w1", T.context_here) == cid
            assert rpc.rpc_sync("w1", T.nested_plain, args=("w2",)) == cid
            assert rpc.rpc_async("w2", T.context_here).wait() == cid
            assert rpc.remote("w1", T.context_here).to_here() == cid
            assert rpc.rpc_sync("w2", T.has_context, args=(cid,))
            # to_here() of a tensor-free value reaches its owner w3 too (checked from a
            # thread outside the context, so the check itself does not carry the id)
            seen = []
            check = lambda: seen.append(rpc.rpc_sync("w3", T.has_context, args=(cid,)))
            th = threading.Thread(target=check)
            th.start()
            th.join()
            assert seen == [False]
            assert counter.to_here() == 5
            th = threading.Thread(target=check)
            th.start()
            th.join()
            assert seen == [False, True]
        del counter
        # released everywhere within 10 s; afterwards every use raises
        t0 = time.monotonic()
        for w in ("w1", "w2", "w3"):
            wait_until(lambda: not rpc.rpc_sync(w, T.has_context, args=(cid,)), timeout=10)  # noqa: B023
        print("released in", round(time.monotonic() - t0, 3), flush=True)
        msg = f"Could not find autograd context with id: {cid}"
        x = tp.ones(2, requires_grad=True)
        expect(RuntimeError, [msg], dist_autograd.get_gradients, cid)
        expect(RuntimeError, [msg], dist_autograd.backward, cid, [(x * 2).sum()])

        # retain_graph: 1000 backward passes accumulate; then one without; then a clear error
        t = tp.tensor([1.0, 2.0, 3.0], requires_grad=True)
        with dist_autograd.context() as cid:
            loss = (rpc.rpc_sync("w1", T.double, args=(t,)) * t).sum()  # d/dt = 4 t
            t0 = time.monotonic()
            for _ in range(1000):
                dist_autograd.backward(cid, [loss], retain_graph=True)
            print("1000 backwards in", round(time.monotonic() - t0, 2), "s", flush=True)
            dist_autograd.backward(cid, [loss])
            g = dist_autograd.get_gradients(cid)[t]
            np.testing.assert_allclose(np.asarray(g), 1001 * 4 * np.array([1.0, 2.0, 3.0]))
            expect(
                RuntimeError,
                ["backward through the graph a second time", "retain_graph=True"],
                dist_autograd.backward,
                cid,
                [loss],
            )
            # the remote half of the freed graph raises too, named by its worker
            y = rpc.rpc_sync("w1", T.double, args=(t,))
            dist_autograd.backward(cid, [y.sum()])
            y2 = y * 1.0  # new local graph over the freed recv node
            expect(
                RuntimeError,
                ["backward through the graph a second time"],
                dist_autograd.backward,
                cid,
                [y2.sum()],
            )
            assert t.grad is None

        # invalid arguments
        with dist_autograd.context() as cid:
            y = rpc.rpc_sync("w1", T.double, args=(t,))
            expect(RuntimeError, ["roots is empty"], dist_autograd.backward, cid, [])
            expect(
                RuntimeError,
                ["roots[0] has shape (3,)", "scalar"],
                dist_autograd.backward,
                cid,
                [y],
            )
            expect(
                RuntimeError,
                ["roots[0] does not require grad"],
                dist_autograd.backward,
                cid,
                [tp.tensor(1.0)],
            )
            expect(TypeError, ["roots is a float", "a Tensor or"], dist_autograd.backward, cid, 1.0)
            expect(TypeError, ["roots[1] is a float"], dist_autograd.backward, cid, [y.sum(), 1.0])
            expect(
                RuntimeError,
                ["Could not find autograd context with id: 12345"],
                dist_autograd.backward,
                12345,
                [y.sum()],
            )
            expect(
                RuntimeError,
                ["Could not find autograd context with id: 12345"],
                dist_autograd.get_gradients,
                12345,
            )
            expect(
                RuntimeError,
                ["autograd.backward(context_id", "outside distributed autograd"],
                y.sum().backward,
            )
            dist_autograd.backward(cid, [y.sum()])  # still fine afterwards
            assert set(dist_autograd.get_gradients(cid)) == {t}

        # an exception in a remote backward: "Error on worker NAME", the context stays usable
        with dist_autograd.context() as cid:
            y = rpc.rpc_sync("w1", T.raise_in_backward, args=(t,))
            expect(
                RuntimeError,
                ["Error on worker w1", "boom in backward"],
                dist_autograd.backward,
                cid,
                [y.sum()],
            )
            z = rpc.rpc_sync("w1", T.relay, args=(t, "w2", T.raise_in_backward))
            expect(
                RuntimeError,
                ["Error on worker w2", "boom in backward"],
                dist_autograd.backward,
                cid,
                [z.sum()],
            )
            ok = rpc.rpc_sync("w2", T.double, args=(t,))
            dist_autograd.backward(cid, [ok.sum()])
            np.testing.assert_allclose(np.asarray(dist_autograd.get_gradients(cid)[t]), 2.0)
        print("single-threaded checks ok", flush=True)

    # 20 threads on each of 3 workers, each its own context with several RPCs and a backward
    if rank < 3:  # w3 only serves
        n = 3
        others = [f"w{(rank + 1) % n}", f"w{(rank + 2) % n}", f"w{rank}", f"w{(rank + 1) % n}"]
        t0 = time.monotonic()
        assert T.threads_job(rank, 20, others) == 20
        print("threads ok in", round(time.monotonic() - t0, 2), "s", flush=True)

    # trainers w0 and w1 (two threads each) on one parameter held by w2
    if rank == 0:
        rref = rpc.remote("w2", T.make_param, args=(7,))
        remote_trainer = rpc.rpc_async("w1", T.trainer_step, args=("w2", rref, 1, 15))
        mine = [threading.Thread(target=T.trainer_step, args=("w2", rref, s, 15)) for s in (2, 3)]
        also = rpc.rpc_async("w1", T.trainer_step, args=("w2", rref, 4, 15))
        for th in mine:
            th.start()
        for th in mine:
            th.join()
        assert remote_trainer.wait() == 15 and also.wait() == 15
        print("parameter server ok", flush=True)
    rpc.shutdown()


# A worker dies (SIGKILL-like exit) inside its backward: survivors raise, in time.
def dead() -> None:
    rank = rank_and_world_size()[0]
    opts = rpc.GrpcRpcBackendOptions(rpc_timeout=20)
    init_rpc(rpc_backend_options=opts)
    if rank == 0:
        t = tp.ones(3, requires_grad=True)
        with dist_autograd.context() as cid:
            z = rpc.rpc_sync("w1", T.relay, args=(t, "w2", T.die_in_backward))
            t0 = time.monotonic()
            e = expect(Exception, ["w2"], dist_autograd.backward, cid, [z.sum()])
            took = time.monotonic() - t0
            print("raised in", round(took, 2), "s:", type(e).__name__, str(e)[:300], flush=True)
            assert took < 20, took
            y = rpc.rpc_sync("w1", T.double, args=(t,))  # the survivors still work
            dist_autograd.backward(cid, [y.sum()])
            np.testing.assert_allclose(np.asarray(dist_autograd.get_gradients(cid)[t]), 2.0)
        print("dead worker ok", flush=True)
    rpc.shutdown()
