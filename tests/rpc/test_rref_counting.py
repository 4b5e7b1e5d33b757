"""Distributed reference counting: owners free values no worker holds an RRef to; leak check."""

from __future__ import annotations

from tests.rpc._scripts import script

COUNTING = script(
    """
    rpc.init_rpc(f"w{rank}", rank=rank, world_size=ws)
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
    """
)


def test_owner_frees_when_no_user_holds_it(workers):
    res = workers(COUNTING, 3, timeout=120)
    assert "COUNT-OK" in res[0].stdout
    assert all(f"DONE {r.rank}" in r.stdout for r in res)


LEAK = script(
    """
    rpc.init_rpc(f"w{rank}", rank=rank, world_size=ws)
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
    """
)


def test_leak_check_reports_values_still_referenced(workers):
    res = workers(LEAK, 2, timeout=120)
    assert "LEAK-REPORTED" in res[0].stdout


FRESH_RREF_TO_THIRD_WORKER = script(
    """
    rpc.init_rpc(f"w{rank}", rank=rank, world_size=ws)
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
    """
)


def test_rref_passed_on_before_its_owner_created_it(workers):
    res = workers(FRESH_RREF_TO_THIRD_WORKER, 3, timeout=120)
    assert "RACE-OK" in res[0].stdout
