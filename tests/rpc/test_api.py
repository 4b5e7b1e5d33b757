"""The public RPC API across real worker processes on loopback."""

from __future__ import annotations

import pytest

from tests.rpc._scripts import script

API = script(
    """
    rpc.init_rpc(f"w{rank}", rank=rank, world_size=ws)
    assert rpc.get_worker_info() == rpc.WorkerInfo(f"w{rank}", rank)
    assert rpc.get_worker_info("w1").id == 1
    rpc.rpc_sync("w1", T.install_hooks) if rank == 0 else None
    if rank == 0:
        x = jnp.arange(4.0)
        # destinations: name, rank, WorkerInfo, this worker
        for to in ("w1", 1, rpc.get_worker_info("w1"), "w0", 0):
            y = rpc.rpc_sync(to, T.add, args=(x, 1))
            assert isinstance(y, type(x)) and (np.asarray(y) == np.arange(1.0, 5.0)).all()
        y = rpc.rpc_sync("w2", T.add, args=(np.ones(3),), kwargs={"y": 2})
        assert type(y) is np.ndarray and (y == 3).all()
        # by value: a lambda with a closure, defined in __main__
        k = 5
        assert rpc.rpc_sync("w1", lambda a: a + k, args=(1,)) == 6
        # containers, namedtuples and dataclasses keep their types
        out = rpc.rpc_sync("w1", T.identity, args=({"a": (x, [np.int8(3)]), "p": T.Pair(1, x)},))
        assert isinstance(out["a"], tuple) and isinstance(out["p"], T.Pair)
        assert out["a"][1][0].dtype == np.int8 and (np.asarray(out["p"].b) == np.asarray(x)).all()
        # async: wait_all, then, done, add_done_callback
        futs = [rpc.rpc_async(f"w{i % 3}", T.add, args=(i, 1)) for i in range(30)]
        assert rpc.wait_all(futs) == list(range(1, 31)) and all(f.done() for f in futs)
        assert rpc.rpc_async("w2", T.add, args=(1, 2)).then(lambda f: f.wait() * 10).wait() == 30
        seen = []
        f = rpc.rpc_async("w2", T.add, args=(2, 2))
        f.add_done_callback(lambda fut: seen.append(fut.value()))
        f.wait()
        wait_until(lambda: seen == [4])
        # a callback that raises (on the reading thread, or in the pool) stops no other one
        seen.clear()
        slow = rpc.rpc_async("w2", T.sleep, args=(0.3,))  # callbacks are in place by then
        slow.add_done_callback(lambda fut: 1 / 0)
        slow.add_done_callback(lambda fut: seen.append(fut.value()))
        assert slow.wait() == 0.3
        wait_until(lambda: seen == [0.3])
        # remote exceptions: same type, remote traceback; the callee keeps serving
        e = expect(ValueError,
                   ["boom", "Remote traceback", "'w1'", "in fail", "tests.rpc._targets.fail"],
                   rpc.rpc_sync, "w1", T.fail, args=("boom",))
        expect(RuntimeError, ["CustomError", "not rebuildable"], rpc.rpc_sync, "w1", T.fail_custom)
        assert rpc.rpc_sync("w1", T.add, args=(1, 1)) == 2
        # remote() and RRef
        rref = rpc.remote("w1", T.make_counter, args=(10,))
        assert rref.owner() == rpc.get_worker_info("w1") and rref.owner_name() == "w1"
        assert not rref.is_owner()
        assert rref.rpc_sync().incr(5) == 15
        assert rref.rpc_async().incr(1).wait() == 16
        assert rref.remote().value().to_here() == 16
        assert rref.to_here() == T.Counter(16) and rref.confirmed_by_owner()
        assert rpc.rpc_sync("w2", T.read_counter, args=([rref],)) == 16  # to a third worker
        expect(RuntimeError, ["local_value() can only be called on the owner", "'w1'"],
               rref.local_value)
        mine = rpc.RRef(np.arange(3))
        assert mine.is_owner() and mine.confirmed_by_owner() and mine.local_value().sum() == 3
        assert rpc.rpc_sync("w1", T.rref_sum, args=(mine,)) == 3
        assert rpc.rpc_sync("w0", T.keep, args=(mine,))  # an RRef sent to its owner is local there
        r3 = rpc.rpc_sync("w2", T.make_rref, args=(7,))
        assert r3.owner_name() == "w2" and r3.to_here() == 7
        r4 = rpc.remote("w0", T.add, args=(1, 2))  # remote() to this worker
        assert r4.to_here() == 3
        bad = rpc.remote("w1", T.fail, args=("late",))  # creation errors surface on use
        expect(ValueError, ["late"], bad.to_here)
        expect(ValueError, ["late"], lambda: bad.rpc_sync().anything())
        assert rpc.rpc_sync("w1", T.async_add, args=("w2", 1, 2)) == 3
        # metadata travels with calls, remote() and to_here; the callee sees the caller
        with rpc.call_metadata(ctx_id=42):
            assert rpc.rpc_sync("w1", T.get_metadata) == {"ctx_id": 42}
            assert rpc.remote("w2", T.get_metadata).to_here() == {"ctx_id": 42}
        assert rpc.rpc_sync("w1", T.get_metadata) == {}
        assert rpc.rpc_sync("w2", T.caller_name) == "w0"
        # hooks on both sides (w1 installed them above)
        T.install_hooks()
        assert rpc.rpc_sync("w1", T.add, args=(3, 4)) == 7
        mine_ev = T.events()
        assert "('send_request', 'call', 'tests.rpc._targets.add', (3, 4))" in mine_ev, mine_ev
        assert "('receive_response', 'call', {'served_by': '1'}, 7)" in mine_ev, mine_ev
        theirs = rpc.rpc_sync("w1", T.events)
        assert "('receive_request', 'call', 'w0', {'hooked': True})" in theirs, theirs
        assert "('send_response', 'call', 7)" in theirs, theirs
        # clear errors
        for to in ("nope", 7, rpc.WorkerInfo("w1", 2)):
            expect(ValueError, ["unknown destination worker"], rpc.rpc_sync, to, T.add, args=(1,))
        expect(TypeError, ["not callable"], rpc.rpc_sync, "w1", 3)
        expect(RuntimeError, ["already initialized", "w0"], rpc.init_rpc, "again", rank=0,
               world_size=3)
        print("API-OK")
    rpc.shutdown()
    expect(RuntimeError, ["RPC has not been initialized"], rpc.rpc_sync, "w1", T.add, args=(1,))
    expect(RuntimeError, ["RPC has not been initialized"], rpc.shutdown)
    print("DONE", rank)
    """
)

SOLO = script(
    """
    expect(RuntimeError, ["RPC has not been initialized"], rpc.rpc_sync, "w0", T.add, args=(1,))
    expect(RuntimeError, ["RPC has not been initialized"], rpc.remote, "w0", T.add, args=(1,))
    expect(ValueError, ["invalid worker name"], rpc.init_rpc, "bad name!", rank=0, world_size=1)
    expect(ValueError, ["invalid worker name"], rpc.init_rpc, "", rank=0, world_size=1)
    opts = rpc.GrpcRpcBackendOptions(rpc_timeout=5, num_worker_threads=4)
    rpc.init_rpc("solo", rank=0, world_size=1, rpc_backend_options=opts)
    me = rpc.get_worker_info()
    for to in ("solo", 0, me):
        assert rpc.rpc_sync(to, T.add, args=(1, 2)) == 3
    r = rpc.remote(me, T.make_counter, args=(1,))
    assert r.rpc_sync().incr(1) == 2 and rpc.rpc_sync("solo", T.read_counter, args=([r],)) == 2
    rpc.shutdown()
    # init again after shutdown works
    rpc.init_rpc("solo2", rank=0, world_size=1)
    assert rpc.rpc_sync("solo2", max, args=(1, 2)) == 2
    rpc.shutdown()
    print("SOLO-OK")
    """
)

DUPLICATE = script(
    """
    expect(ValueError, ["duplicate worker name 'same'", "ranks 0 and 1"], rpc.init_rpc, "same",
           rank=rank, world_size=ws)
    print("DUP-OK", rank)
    """
)

# w1 returns from the rendezvous late: w0 calls it (and w1 calls on from inside) before
# w1's init_rpc has returned. The request waits for it instead of finding no agent.
LATE_INIT = script(
    """
    if rank == 1:
        from tensorplay_jax.rpc import _agent
        start = _agent.Agent.start
        def late_start(self):
            start(self)
            time.sleep(3.0)  # rendezvous done, init_rpc not returned yet
        _agent.Agent.start = late_start
    rpc.init_rpc(f"w{rank}", rank=rank, world_size=ws)
    if rank == 0:
        t0 = time.monotonic()
        assert list(rpc.rpc_sync("w1", T.relay_caller, args=("w2",))) == ["w1", "w1"]
        print("LATE-OK after", round(time.monotonic() - t0, 2), "s", flush=True)
    rpc.shutdown()
    """
)


@pytest.mark.parametrize("transport", ["local", "grpc"])
def test_api_three_workers(workers, transport):
    env = {"TENSORPLAY_JAX_RPC_LOCAL": "1" if transport == "local" else "0"}
    res = workers(API, 3, timeout=150, env=env)
    assert "API-OK" in res[0].stdout
    assert all(f"DONE {r.rank}" in r.stdout for r in res)


@pytest.mark.parametrize("transport", ["local", "grpc"])
def test_call_into_a_worker_still_in_init_rpc_waits(workers, transport):
    env = {"TENSORPLAY_JAX_RPC_LOCAL": "1" if transport == "local" else "0"}
    res = workers(LATE_INIT, 3, timeout=120, env=env)
    assert "LATE-OK" in res[0].stdout, res[0].stdout


def test_world_size_one_and_calls_before_init(workers):
    (res,) = workers(SOLO, 1, timeout=90)
    assert "SOLO-OK" in res.stdout


def test_duplicate_names_fail_on_every_worker(workers):
    res = workers(DUPLICATE, 2, timeout=90)
    assert all(f"DUP-OK {r.rank}" in r.stdout for r in res)
