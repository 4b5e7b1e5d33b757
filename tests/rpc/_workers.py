"""Worker code for the RPC tests: each function runs in every rank (see ``tests._procs``)."""

from __future__ import annotations

import gc
import os
import time
import warnings

import jax.numpy as jnp
import numpy as np

from tensorplay_jax.distributed import rpc
from tests._worker import expect, init_rpc, rank_and_world_size, wait_until
from tests.rpc import _targets as T


def api() -> None:
    rank = rank_and_world_size()[0]
    init_rpc()
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
        # by value: a lambda with a closure, defined in this function
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
        expect(
            ValueError,
            ["boom", "Remote traceback", "'w1'", "in fail", "tests.rpc._targets.fail"],
            rpc.rpc_sync,
            "w1",
            T.fail,
            args=("boom",),
        )
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
        expect(
            RuntimeError,
            ["local_value() can only be called on the owner", "'w1'"],
            rref.local_value,
        )
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
        expect(
            RuntimeError, ["already initialized", "w0"], rpc.init_rpc, "again", rank=0, world_size=3
        )
        print("API-OK")
    rpc.shutdown()
    expect(RuntimeError, ["RPC has not been initialized"], rpc.rpc_sync, "w1", T.add, args=(1,))
    expect(RuntimeError, ["RPC has not been initialized"], rpc.shutdown)
    print("DONE", rank)


def solo() -> None:
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


def duplicate() -> None:
    rank, ws = rank_and_world_size()
    expect(
        ValueError,
        ["duplicate worker name 'same'", "ranks 0 and 1"],
        rpc.init_rpc,
        "same",
        rank=rank,
        world_size=ws,
    )
    print("DUP-OK", rank)


# w1 returns from the rendezvous late: w0 calls it (and w1 calls on from inside) before
# w1's init_rpc has returned. The request waits for it instead of finding no agent.
def late_init() -> None:
    rank = rank_and_world_size()[0]
    if rank == 1:
        from tensorplay_jax.rpc import _agent

        start = _agent.Agent.start

        def late_start(self):
            start(self)
            time.sleep(3.0)  # rendezvous done, init_rpc not returned yet

        _agent.Agent.start = late_start
    init_rpc()
    if rank == 0:
        t0 = time.monotonic()
        assert list(rpc.rpc_sync("w1", T.relay_caller, args=("w2",))) == ["w1", "w1"]
        print("LATE-OK after", round(time.monotonic() - t0, 2), "s", flush=True)
    rpc.shutdown()


def timeouts_and_kill() -> None:
    rank = rank_and_world_size()[0]
    opts = rpc.GrpcRpcBackendOptions(rpc_timeout=1.5)
    init_rpc(rpc_backend_options=opts)
    if rank == 0:
        t = time.monotonic()
        e = expect(
            TimeoutError,
            ["RPC ran for more than 0.5 seconds", "'w1'", "tests.rpc._targets.sleep"],
            rpc.rpc_sync,
            "w1",
            T.sleep,
            args=(5,),
            timeout=0.5,
        )
        assert isinstance(e, rpc.RpcTimeoutError) and time.monotonic() - t < 3
        expect(
            TimeoutError,
            ["RPC ran for more than 1.5 seconds"],
            rpc.rpc_async("w1", T.sleep, args=(5,)).wait,
        )  # the default from the options
        slow = rpc.remote("w1", T.sleep, args=(5,), timeout=0.5)
        time.sleep(0.8)
        expect(TimeoutError, ["RPC ran for more than 0.5 seconds", "remote"], slow.to_here)
        assert rpc.rpc_sync("w1", T.add, args=(1, 1), timeout=0) == 2  # no limit, still serving
        # kill w2 while a call to it is running: the call fails fast and names the peer
        pending = rpc.rpc_async("w2", T.sleep, args=(30,), timeout=20)
        rpc.rpc_sync("w2", T.die_soon, args=(0.3,))
        t = time.monotonic()
        expect(rpc.RpcPeerError, ["'w2'", "lost the connection"], pending.wait)
        assert time.monotonic() - t < 5, time.monotonic() - t
        e = expect(Exception, ["w2"], rpc.rpc_sync, "w2", T.add, args=(1, 1), timeout=3)
        assert time.monotonic() - t < 8
        assert rpc.rpc_sync("w1", T.add, args=(2, 2)) == 4  # the others keep serving
        print("FAULTS-OK")
    if rank == 2:
        time.sleep(60)  # killed by die_soon
    rpc.shutdown()
    print("DONE", rank)


def raw() -> None:
    rank = rank_and_world_size()[0]
    import pathlib

    import grpc

    from tensorplay_jax.rpc import _codec, _framing, _grpc

    tmp = pathlib.Path(os.environ["TPJ_TMP"])
    if rank == 0:  # the RPC worker (a world of one, on its own store port)
        os.environ.update(MASTER_PORT=os.environ["TPJ_STORE_PORT"], WORLD_SIZE="1")
        rpc.init_rpc("server", rank=0, world_size=1)
        from tensorplay_jax.rpc import _agent

        (tmp / "addr.tmp").write_text(_agent.current_agent().address)
        (tmp / "addr.tmp").rename(tmp / "addr")
        wait_until(lambda: (tmp / "client-done").exists(), timeout=60)
        assert not (tmp / "unauth-marker").exists(), "a call without the secret ran"
        assert (tmp / "auth-marker").read_text() == "ran"
        assert rpc.rpc_sync("server", T.add, args=(1, 2)) == 3  # still serving
        rpc.shutdown()
        print("SERVER-OK")
    else:  # a raw gRPC client speaking the wire format by hand
        wait_until(lambda: (tmp / "addr").exists(), timeout=60)
        channel = grpc.insecure_channel((tmp / "addr").read_text())
        stream = channel.stream_stream(_grpc.METHOD_PATH)

        def request(mid, fn, *args):
            ob = _framing.Outbox()
            body = _codec.encode((fn, args, {}))
            ob.put(_codec.dumps_small([1, mid, {}]), body.header, body.buffers)
            return next(ob.packets())

        def replies(packets, metadata, n):
            inbox = _framing.Inbox()
            out = []
            for p in stream(iter(packets), metadata=metadata, timeout=20):
                for m in inbox.feed(p):
                    env = _codec.loads_small(m.envelope)
                    out.append((env, _codec.decode(bytes(m.header), m.buffers)))
                if len(out) == n:
                    break
            return out

        unauth = request(1, T.touch, str(tmp / "unauth-marker"))
        for md in [(), (("tpj-secret", "wrong"),), (("tpj-secret", ""),)]:
            try:
                replies([unauth], md, 1)
                raise AssertionError("no error without the secret")
            except grpc.RpcError as e:
                assert e.code() == grpc.StatusCode.UNAUTHENTICATED, e
                assert "secret" in e.details()
        good = request(2, T.touch, str(tmp / "auth-marker"))
        valid = request(3, T.add, 40, 2)
        garbage = [b"\x01\xff\xff\xff\xff", b"\x07junk", valid[:-3], b"\x01" + b"\0" * 12]
        secret = os.environ["TENSORPLAY_JAX_RPC_SECRET"]
        md = _grpc.auth_metadata(secret, "raw", (tmp / "addr").read_text())
        out = replies([garbage[0], garbage[1], garbage[2], garbage[3], good, valid], md, 6)
        errs = [(env, val) for env, val in out if env[0] == 17]
        oks = {env[1]: val for env, val in out if env[0] == 16}
        assert len(errs) == 4 and all("malformed" in val[2] for _, val in errs), out
        assert oks == {2: str(tmp / "auth-marker"), 3: 42}, out
        (tmp / "client-done").write_text("1")
        print("CLIENT-OK")


def tls() -> None:
    rank = rank_and_world_size()[0]
    d = os.environ["TPJ_CERTS"]
    opts = rpc.GrpcRpcBackendOptions(
        tls_cert_chain=f"{d}/cert.pem",
        tls_private_key=f"{d}/key.pem",
        tls_root_certs=f"{d}/cert.pem",
        tls_require_client_auth=True,
    )
    init_rpc(rpc_backend_options=opts)
    if rank == 0:
        x = np.arange(3 << 18, dtype=np.float32)  # large enough to be chunked
        assert (rpc.rpc_sync("w1", T.identity, args=(x,)) == x).all()
        assert rpc.remote("w1", T.add, args=(1, 2)).to_here() == 3
        import grpc

        from tensorplay_jax.rpc import _agent, _grpc

        peer = _agent.current_agent()._addresses[1]
        stream = grpc.insecure_channel(peer).stream_stream(_grpc.METHOD_PATH)
        try:  # a plaintext client cannot talk to a TLS server
            next(iter(stream(iter([b"\x01"]), timeout=5)))
            raise AssertionError("plaintext reached a TLS server")
        except grpc.RpcError as e:
            assert e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED), e
        print("TLS-OK")
    rpc.shutdown()


def large() -> None:
    rank = rank_and_world_size()[0]
    mib = int(os.environ["TPJ_MIB"])
    init_rpc()
    if rank == 0:
        x = (np.arange(mib << 20, dtype=np.uint32) % 251).astype(np.uint8)
        base1 = rpc.rpc_sync("w1", T.maxrss_mib)
        y = rpc.rpc_sync("w1", T.identity, args=(x,), timeout=0)
        assert y.shape == x.shape and y.dtype == x.dtype and np.array_equal(x, y)
        peak1 = rpc.rpc_sync("w1", T.maxrss_mib)
        # the callee held one received copy; allow about 2x the payload over its baseline
        assert peak1 - base1 <= 2.2 * mib, (base1, peak1)
        del y
        z = rpc.rpc_sync("w1", T.identity, args=(jnp.asarray(x[: 64 << 20]),), timeout=0)
        assert isinstance(z, type(jnp.asarray(x[:1]))) and int(z[-1]) == int(x[(64 << 20) - 1])
        print("LARGE-OK", base1, peak1)
    rpc.shutdown()


def transport() -> None:
    rank = rank_and_world_size()[0]
    init_rpc()
    if rank == 0:
        from tensorplay_jax.rpc import _agent
        from tensorplay_jax.rpc._socket import spinner

        x = np.arange(4 << 20, dtype=np.float32)
        assert np.array_equal(rpc.rpc_sync("w1", T.identity, args=(x,)), x)
        assert rpc.rpc_sync("w1", T.add, args=(1, 2)) == 3
        # a served call that blocks must not hold up the requests behind it on the link
        gates = [rpc.rpc_async("w1", T.wait_gate, args=(30,)) for _ in range(3)]
        time.sleep(0.2)
        rpc.rpc_sync("w1", T.open_gate, timeout=10)
        assert rpc.wait_all(gates) == [True] * 3
        print("LINK", type(_agent.current_agent().connections.links[1]).__name__)
        print("SPIN", spinner._SPIN is not None)
    rpc.shutdown()


def counting() -> None:
    rank = rank_and_world_size()[0]
    init_rpc()
    if rank == 0:
        owned = lambda: rpc.rpc_sync("w1", T.num_owned)
        alive = lambda: rpc.rpc_sync("w1", T.tracked_alive)
        r = rpc.remote("w1", T.make_tracked, args=(1000,))
        assert r.to_here().data.shape == (1000,)
        assert owned() == 1 and alive() == 1
        assert rpc.rpc_sync("w2", T.keep, args=(r,)) is False  # w2 becomes a user too
        del r
        gc.collect()
        time.sleep(0.5)
        assert owned() == 1 and alive() == 1  # w2 still holds it
        rpc.rpc_sync("w2", T.drop)
        wait_until(lambda: owned() == 0 and alive() == 0)
        # many copies in flight, in containers, to several workers, dropped at once
        r = rpc.remote("w1", T.make_tracked, args=(10,))
        futs = [rpc.rpc_async(f"w{i % 3}", T.identity, args=([r, {"k": r}],)) for i in range(20)]
        outs = rpc.wait_all(futs)
        assert all(o[0].owner_name() == "w1" for o in outs)
        assert rpc.rpc_sync("w1", T.keep, args=(r,)) is True  # at the owner it is local
        rpc.rpc_sync("w1", T.drop)
        del r, outs, futs
        gc.collect()
        wait_until(lambda: owned() == 0 and alive() == 0)
        # an owner RRef sent around is released too
        mine = rpc.RRef(np.ones(3))
        assert rpc.rpc_sync("w2", T.rref_sum, args=(mine,)) == 3
        wait_until(lambda: rpc.get_debug_info()["num_owner_rrefs"] == 0)
        # users still holding RRefs at graceful shutdown release them: no leak reported
        rpc.rpc_sync("w2", T.keep, args=(rpc.remote("w1", T.make_tracked, args=(5,)),))
        print("COUNT-OK")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rpc.shutdown()
    leaks = [str(w.message) for w in caught if "RRef leak check" in str(w.message)]
    assert not leaks, leaks
    print("DONE", rank)


def leak() -> None:
    rank = rank_and_world_size()[0]
    init_rpc()
    if rank == 0:
        rpc.rpc_sync("w1", T.keep, args=(rpc.remote("w0", T.make_tracked, args=(5,)),))
        gc.collect()
        rpc.rpc_sync("w1", T.leave_soon)  # w1 leaves holding it, without a graceful shutdown
        wait_until(lambda: rpc.rpc_async("w1", T.add, args=(1, 1)).exception() is not None)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            rpc.shutdown()
        leaks = [str(w.message) for w in caught if "RRef leak check" in str(w.message)]
        assert len(leaks) == 1 and "'w0' still owns 1 value" in leaks[0], leaks
        print("LEAK-REPORTED")
    else:
        wait_until(lambda: not rpc.is_initialized(), timeout=60)


def fresh_rref_to_third_worker() -> None:
    rank = rank_and_world_size()[0]
    init_rpc()
    if rank == 0:
        # remote() on w1, then at once hand the RRef to w2, which fetches it from w1: w2's
        # fetch can reach w1 before the remote() call does; the owner must wait for the
        # value (as tensorplay's owner does), not report the RRef missing.
        futs = []
        for i in range(100):
            r = rpc.remote("w1", np.full, args=(3, i))
            futs.append(rpc.rpc_async("w2", T.rref_sum, args=(r,)))
        assert [int(f.wait()) for f in futs] == [3 * i for i in range(100)]
        del r, futs
        gc.collect()
        wait_until(lambda: rpc.rpc_sync("w1", T.num_owned) == 0)
        print("RACE-OK")
    rpc.shutdown()


# A notebook cell: run in ``__main__``, which has no file (as in a notebook or a REPL).
NOTEBOOK_CELL = """
import os, threading
RANK = int(os.environ["RANK"])
cell_lock = threading.Lock()

def cell_rank():
    return RANK

def cell_locked_rank():
    with cell_lock:
        return RANK
"""


def notebook_cells() -> None:
    import __main__

    rank = init_rpc()[0]
    exec(compile(NOTEBOOK_CELL, "<cell>", "exec"), __main__.__dict__)  # what a notebook does
    if rank == 0:
        # No main file to compare: cell functions go by value, with the caller's globals.
        assert rpc.rpc_sync("w1", __main__.cell_rank) == 0
        cell_rank = __main__.cell_rank
        assert rpc.rpc_sync("w1", lambda: cell_rank() + 10) == 10  # a closure over it too
        # To this worker itself they go by name (the lock is no obstacle).
        assert rpc.rpc_sync("w0", __main__.cell_locked_rank) == 0
        why = ["cell_locked_rank", "no main script file", "pickling it failed", "can import"]
        expect(TypeError, why, rpc.rpc_sync, "w1", __main__.cell_locked_rank)
        print("CELLS-OK")
    rpc.shutdown()
