"""What tensorplay scripts call beside the collectives, on 2 and 4 real processes.

Async work handles on every collective, isend/irecv and batch_isend_irecv, the
object collectives, all_gather_into_tensor / reduce_scatter_tensor, rank maps,
new_subgroups, monitored_barrier, GroupMember.WORLD: one launch per world size
runs them all (``_pg_api_workers.api``) and hands back what each returned or raised;
each test checks one behaviour on every rank against numpy computed from every
rank's input. Engines: XLA programs and TCP on 2 ranks, shared memory on 4.
"""

import importlib.util

import numpy as np
import pytest

import tensorplay_jax.distributed as dist
from tests._procs import run_and_collect
from tests.distributed import _pg_api_workers as W


@pytest.fixture(
    scope="module", params=[("xla", 2), ("shm", 4), ("tcp", 2)], ids=lambda p: f"{p[0]}-{p[1]}"
)
def api(request, tmp_path_factory) -> list[dict]:
    """Every rank's results of one ``_pg_api_workers.api`` job (``(engine, world size)``)."""
    engine, n = request.param
    out = tmp_path_factory.mktemp(f"api-{engine}-{n}")
    return run_and_collect(W.api, n, out, args=[engine], timeout=280)


def _close(got, want) -> None:
    got = np.asarray(got)
    assert got.shape == np.shape(want), (got.shape, np.shape(want))
    np.testing.assert_allclose(got, want, rtol=1e-6)


def _raised(text: str | None, kind: str, *parts: str) -> None:
    assert text is not None and text.startswith(kind + ": "), text
    for part in parts:
        assert part in text, (part, text)


def test_rank_maps_and_world(api):
    n = len(api)
    for got in api:
        assert [got["basics/available"], got["basics/initialized"]] == [True, True]
        assert got["basics/backend"] == "gloo" and got["basics/world_is_one_group"] is True
        assert got["basics/ranks_none"] == got["basics/ranks_world"] == list(range(n))
        assert got["basics/ranks_sub"] == [0, n - 1]
        assert got["basics/global_ranks_sub"] == [0, n - 1]
        assert got["basics/group_ranks_sub"] == [0, 1]
        _raised(
            got["basics/global_rank_bad"],
            "ValueError",
            "get_global_rank: group_rank=2 is not a rank",
        )
        _raised(
            got["basics/group_rank_bad"], "ValueError", f"global rank {n} is not part of the group"
        )
        _raised(got["basics/ranks_of_a_string"], "TypeError", "is not a ProcessGroup")


def test_a_non_member_sees_size_and_rank_minus_one_and_no_backend(api):
    n = len(api)
    for r, got in enumerate(api):
        if r in (0, n - 1):
            assert got["basics/member_size_rank"] == [2, [0, n - 1].index(r)]
            assert got["basics/member_backend"] == "gloo"
        else:
            assert got["basics/member_size_rank"] == [-1, -1]
            _raised(got["basics/member_backend"], "ValueError", "Invalid process group specified")


def test_a_group_s_own_timeout_bounds_its_barrier(api):
    _raised(api[0]["basics/group_timeout"], "TimeoutError", "barrier: Timed out after 0.5s")
    assert 0.5 <= api[0]["basics/group_timeout_s"] < 5, api[0]["basics/group_timeout_s"]


def test_the_autograd_profiler_names_a_collective_as_tensorplay_does(api):
    for got in api:
        events = [e for e in got["torch_forms/profile"] if ":" in e[0]]
        assert events == [("gloo:all_reduce", True, [[2, 3]])], got["torch_forms/profile"]


def test_the_profilers_name_point_to_point_calls_as_tensorplay_does(api):
    # profiler.profile (torch.profiler's API) around an irecv / isend ring
    for got in api:
        want = [("gloo:recv", True, [[4, 2]]), ("gloo:send", True, [[4, 2]])]
        assert got["torch_forms/profile/p2p"] == want, got["torch_forms/profile/p2p"]


def test_async_all_reduce_work_and_future(api):
    n = len(api)
    total = np.stack([W.inputs(k) for k in range(n)]).sum(0)
    for got in api:
        assert got["async/sum/is_work"] is True and got["async/sum/waits"] == [True, True]
        assert got["async/sum/state"] == [True, True, None]
        assert got["async/sum/future_done"] is True
        for key in ("result", "future_wait", "future_value"):
            _close(got[f"async/sum/{key}"], total)
        _close(got["async/sum/then"], 2 * total)
        assert got["async/blocking_returns"] is True


def _async_wants(n: int, r: int) -> dict[str, np.ndarray]:
    xs = [W.inputs(k) for k in range(n)]
    stack = np.stack(xs)
    ss = [W.inputs(k, (n, 2, 3)) for k in range(n)]
    root = n - 1
    return {
        "all_reduce_min": stack.min(0),
        "broadcast": xs[root],
        "reduce": stack.sum(0) if r == root else np.zeros_like(xs[0]),
        "all_gather": stack,
        "gather": stack if r == 0 else np.zeros_like(stack),
        "scatter": ss[root][r],
        "reduce_scatter": np.sum(ss, 0)[r],
        "all_to_all": np.stack([ss[j][r] for j in range(n)]),
        "all_to_all_single": np.concatenate(
            [np.arange(2 * r, 2 * r + 2) + 100.0 * j for j in range(n)]
        ),
    }


@pytest.mark.parametrize("op", list(_async_wants(2, 0)))
def test_async_op_returns_a_work_with_the_result(api, op):
    for r, got in enumerate(api):
        want = _async_wants(len(api), r)[op]
        assert got[f"async/{op}/is_work"] is True, r
        assert got[f"async/{op}/wait"] and got[f"async/{op}/completed"], r
        _close(got[f"async/{op}/result"], want)
        _close(got[f"async/{op}/future_value"], want)


def test_async_and_blocking_barrier(api):
    for got in api:
        assert got["async/barrier"] == [True, None, None]


def test_all_gather_into_tensor_and_0d_pieces(api):
    n = len(api)
    xs = [W.inputs(k, (2, 3)) for k in range(n)]
    for r, got in enumerate(api):
        _close(got["tensor_forms/agit_concat"], np.concatenate(xs))
        _close(got["tensor_forms/agit_stacked"], np.stack(xs))
        _close(got["tensor_forms/agit_scalars_async"], np.arange(n) + 0.5)
        _close(got["tensor_forms/all_gather_0d"], np.arange(n) + 0.5)
        _close(got["tensor_forms/all_to_all_0d"], np.arange(n) * n + r)
        if r == 0:
            _close(got["tensor_forms/gather_0d"], np.arange(n) + 0.25)
        _raised(
            got["tensor_forms/agit_bad_shape"],
            "ValueError",
            f"all_gather_into_tensor: output_tensor has shape (5,); for an input of shape (2, 3) "
            f"and a group of {n} it must be ({2 * n}, 3) (concatenated) or ({n}, 2, 3)",
        )
        _raised(
            got["tensor_forms/agit_bad_dtype"],
            "TypeError",
            "output dtype int32 differs from the input's float32",
        )


def test_reduce_scatter_tensor(api):
    n = len(api)
    ins = [W.inputs(k, (n * 2, 3)) for k in range(n)]  # rows 2j, 2j+1 are for rank j
    total = np.sum(ins, 0)
    for r, got in enumerate(api):
        _close(got["tensor_forms/rst_concat"], total[2 * r : 2 * r + 2])
        _close(got["tensor_forms/rst_stacked_max"], np.max(ins, 0)[2 * r : 2 * r + 2])
        _close(got["tensor_forms/rst_async"], total[r : r + 1, 0])
        _raised(
            got["tensor_forms/rst_bad_shape"],
            "ValueError",
            "reduce_scatter_tensor: input has shape (3,)",
        )


def test_tensorplay_forms_fill_tensors_in_place(api):
    n = len(api)
    xs = [W.inputs(k, (2, 3)) for k in range(n)]
    for r, got in enumerate(api):
        assert got["torch_forms/all_reduce/returns"] == "None"
        _close(got["torch_forms/all_reduce"], np.sum(xs, 0))
        _close(got["torch_forms/broadcast"], xs[n - 1])
        _close(got["torch_forms/reduce"], np.max(xs, 0) if r == 0 else xs[r])
        assert got["torch_forms/async/result_is_the_tensor"] == ["Tensor"]


def test_tensorplay_forms_fill_output_lists(api):
    n = len(api)
    xs = [W.inputs(k, (2, 3)) for k in range(n)]
    for r, got in enumerate(api):
        _close(got["torch_forms/all_gather"], np.stack(xs))
        _close(got["torch_forms/all_gather/array_slots"], np.stack(xs))
        _close(got["torch_forms/all_gather_into_tensor"], np.concatenate(xs))
        _close(got["torch_forms/scatter"], xs[r])
        # rank k sent inputs(k * n + j) to rank j
        _close(
            got["torch_forms/reduce_scatter"], sum(W.inputs(k * n + r, (2, 3)) for k in range(n))
        )
        _close(
            got["torch_forms/all_to_all"], np.stack([W.inputs(k * n + r, (2, 3)) for k in range(n)])
        )
        if r == 0:
            _close(got["torch_forms/gather"], np.stack(xs))
        else:
            _raised(
                got["torch_forms/gather/list_off_dst"],
                "ValueError",
                "``gather_list`` must NOT be specified on non-destination ranks",
            )
        _raised(
            got["torch_forms/all_gather/short_list"],
            "ValueError",
            f"all_gather: tensor_list must be a list of {n} tensors",
        )


def test_coalesced_calls_fill_every_tensor_of_every_dtype(api):
    n = len(api)
    xs = [W.inputs(k, (2, 3)) for k in range(n)]
    ks = [np.arange(3, dtype=np.int32) * (k + 1) for k in range(n)]
    for got in api:
        _close(got["torch_forms/coalesced/all_reduce"][0], np.sum(xs, 0))
        np.testing.assert_array_equal(got["torch_forms/coalesced/all_reduce"][1], np.sum(ks, 0))
        for j, row in enumerate(got["torch_forms/coalesced/all_gather"]):
            _close(row[0], xs[j])
            np.testing.assert_array_equal(row[1], ks[j])


def test_a_sparse_tensor_is_summed_in_place_and_coalesced(api):
    n = len(api)
    want = np.zeros(n + 1, np.float32)
    for k in range(n):
        want[0] += 1.0
        want[k + 1] += 2.0 * (k + 1)
    for got in api:
        dense, coalesced = got["torch_forms/sparse/all_reduce"]
        _close(dense, want)
        assert coalesced is True
        _raised(got["torch_forms/sparse/max"], "ValueError", "a sparse tensor can only be summed")


def test_bitwise_reductions_of_integers(api):
    n = len(api)
    ints = np.stack([np.array([k + 1, 2 * k + 3, 7 - k, 12], np.int32) for k in range(n)])
    oracle = {"band": np.bitwise_and, "bor": np.bitwise_or, "bxor": np.bitwise_xor}
    for got in api:
        for op, fn in oracle.items():
            np.testing.assert_array_equal(got[f"torch_forms/bitwise/{op}"], fn.reduce(ints))
            np.testing.assert_array_equal(
                got[f"torch_forms/bitwise/{op}/reduce_scatter"], fn.reduce(ints)
            )
        _raised(got["torch_forms/bitwise/floats"], "TypeError", "needs an integer or bool input")
        _raised(
            got["torch_forms/bitwise/complex_tensor"],
            "ValueError",
            "all_reduce does not support",
            "on complex tensors",
        )


def test_tensorplay_forms_receive_into_tensors(api):
    n = len(api)
    for r, got in enumerate(api):
        _close(got["torch_forms/irecv"], W.payload((r - 1) % n))
        if r == 1:
            assert got["torch_forms/recv/sender"] == 0
            _close(got["torch_forms/recv"], W.payload(7))


def test_isend_irecv_ring_and_batch(api):
    n = len(api)
    for r, got in enumerate(api):
        nxt, prv = (r + 1) % n, (r - 1) % n
        assert got["p2p/ring/are_work"] == [True, True]
        assert got["p2p/ring/send"] == [True, None]
        assert got["p2p/ring/recv_completed"] is True
        _close(got["p2p/ring/recv"], W.payload(prv))
        assert got["p2p/batch/count"] == 4
        _close(got["p2p/batch/from_prev"], W.payload(prv) * 2)
        _close(got["p2p/batch/from_next"], W.payload(nxt) * 3)


def test_queued_p2p_keeps_order_and_runs_before_a_collective(api):
    n = len(api)
    for r, got in enumerate(api):
        partner = r ^ 1
        if partner < n:
            assert got["p2p/queued/future_sum"] == float((W.payload(partner) + 2).sum())
            for i, y in enumerate(got["p2p/queued/recvs"]):
                _close(y, W.payload(partner) + i)
            assert got["p2p/queued/sends_completed"] is True
        _close(got["p2p/before_collective/all_reduce"], np.full(2, n))
        if r % 2 == 0 and r + 1 < n:
            assert got["p2p/before_collective/isend_completed"] is True
        elif r % 2 == 1:
            _close(got["p2p/before_collective/recv"], W.payload(r - 1))
        assert got["p2p/pending_after"] == 0


def test_p2p_async_op_and_group_relative_peers(api):
    n = len(api)
    _close(api[0]["p2p/group_relative/recv"], W.payload(n - 1))
    _close(api[n - 1]["p2p/group_relative/recv"], W.payload(0))


def test_p2p_bad_arguments(api):
    for r, got in enumerate(api):
        _raised(got["p2p/errors/irecv_no_src"], "ValueError", "irecv: src is required")
        _raised(
            got["p2p/errors/isend_to_self"],
            "ValueError",
            f"isend: dst={r} is this process's own rank",
        )
        _raised(
            got["p2p/errors/p2pop_send"],
            "ValueError",
            "P2POp: op=",
            "must be tensorplay_jax.distributed.isend or irecv",
        )
        _raised(got["p2p/errors/batch_empty"], "ValueError", "non-empty list of P2POp")
        _raised(got["p2p/errors/batch_not_ops"], "ValueError", "batch_isend_irecv: p2p_op_list")


def test_object_collectives(api):
    n = len(api)
    objs = [W.obj(k) for k in range(n)]
    for r, got in enumerate(api):
        assert got["objects/all_gather/returns"] is None
        assert got["objects/all_gather/objects"] == objs
        assert got["objects/all_gather/lambdas_at_1"] == [10 + k for k in range(n)]
        for src in range(n):
            assert got[f"objects/broadcast/src{src}"] == [objs[src], ("t", src), None]
            assert got[f"objects/gather/dst{src}"] == (objs if r == src else None)
            assert got[f"objects/scatter/src{src}"] == [(src, r, "y" * (7 * r))]
        if r in (0, n - 1):
            assert got["objects/broadcast/group_src"] == [("from", n - 1), n - 1]
        _raised(
            got["objects/errors/short_list"],
            "ValueError",
            "all_gather_object: Expected argument object_list to be a list of size at least",
        )


def test_send_recv_object_list_ring(api):
    n = len(api)
    for r, got in enumerate(api):
        prv = (r - 1) % n
        assert got["objects/ring/sender"] == prv
        assert got["objects/ring/objects"] == [W.obj(prv), {"to": r}]


def test_new_subgroups(api):
    n = len(api)
    for r, got in enumerate(api):
        assert got["subgroups/pairs/ranks"] == [(i, i + 1) for i in range(0, n, 2)]
        assert got["subgroups/pairs/mine_is_mine"] is True
        assert got["subgroups/pairs/rank"] == r % 2
        lo = r - r % 2
        _close(got["subgroups/pairs/all_reduce"], (lo + 1) + (lo + 2))
        assert got["subgroups/host/ranks"] == [tuple(range(n))]
        assert got["subgroups/host/mine"] == tuple(range(n))
        if n == 4:
            assert got["subgroups/singles/ranks"] == [(0,), (1,), (2,), (3,)]
            assert got["subgroups/singles/mine"] == (r,)
            _raised(
                got["subgroups/errors/not_divisible"],
                "ValueError",
                "the group's size 4 must be divisible by group_size=3",
            )
        _raised(got["subgroups/errors/zero"], "ValueError", "group_size=0 must be a positive int")


def test_new_subgroups_by_enumeration(api):
    n = len(api)
    for r, got in enumerate(api):
        evens, odds = tuple(range(0, n, 2)), tuple(range(1, n, 2))
        assert got["subgroups/enumerated/ranks"] == [evens, odds]
        assert got["subgroups/enumerated/mine"] == (evens if r % 2 == 0 else odds)
        want = sum(q + 1 for q in (evens if r % 2 == 0 else odds))
        _close(got["subgroups/enumerated/all_reduce"], want)
        _raised(
            got["subgroups/errors/overlap"],
            "ValueError",
            "Rank 1 has appeared in both subgroup [0, 1] and [1]",
        )
        _raised(got["subgroups/errors/out_of_range"], "ValueError", f"Rank {n} is out of range")
        _raised(got["subgroups/errors/empty"], "ValueError", "cannot be empty")


def test_monitored_barrier_names_the_missing_ranks(api):
    n = len(api)
    late = list(range(n // 2, n))
    for r, got in enumerate(api):
        assert got["monitored/all_come"] == [None, None]
        if r in late:
            assert "monitored/first_missing" not in got
            continue
        first = f"Rank {late[0]} failed to pass monitoredBarrier in 2000 ms"
        _raised(got["monitored/first_missing"], "RuntimeError", f"rank(s) [{late[0]}]", first)
        every = "Rank 1 failed" if n == 2 else "Ranks 2, 3 failed to pass monitoredBarrier"
        _raised(got["monitored/every_missing"], "RuntimeError", str(late), every)
        if r != 0:  # a rank that came hears it from rank 0, in tensorplay's words
            came = (
                f"Rank {r} successfully reached monitoredBarrier, but received errors while "
                "waiting for send/recv from rank 0"
            )
            _raised(got["monitored/first_missing"], "RuntimeError", came)
    zero = "Rank 0 timed out in monitoredBarrier"
    _raised(api[0]["monitored/zero_timeout"], "RuntimeError", zero)


def test_destroy_fails_a_queued_isend_and_clears_the_world(api):
    for got in api:
        _raised(
            got["destroy/queued_isend"],
            "RuntimeError",
            "isend: not run: destroy_process_group() ran first",
        )
        assert got["destroy/world"] is None and got["destroy/initialized"] is False


@pytest.mark.parametrize(
    "call",
    [
        lambda: dist.isend(np.ones(2), dst=1),
        lambda: dist.irecv(np.ones(2), src=1),
        lambda: dist.all_gather_object([None], 1),
        lambda: dist.all_gather_into_tensor(np.ones(2), np.ones(2)),
        lambda: dist.get_process_group_ranks(None),
        lambda: dist.monitored_barrier(),
        lambda: dist.new_subgroups(1),
    ],
)
def test_call_before_init_process_group_raises(call):
    assert not dist.is_initialized() and dist.GroupMember.WORLD is None and dist.is_available()
    with pytest.raises(RuntimeError, match=r"call tensorplay_jax\.distributed\.init_process_group"):
        call()


def test_work_and_future_without_a_job():
    w = dist.Work.completed(3)
    assert w.wait() is True and w.is_completed() and w.result() == 3
    f = dist.Future()
    g = f.then(lambda fut: fut.value() + 1)
    h = g.then(lambda fut: 1 / 0)
    assert not f.done() and not g.done()
    f.set_result(1)
    assert g.wait() == 2 and h.done()
    with pytest.raises(RuntimeError) as got:  # a then callback's error, wrapped as tensorplay's
        h.wait()
    assert isinstance(got.value.__cause__, ZeroDivisionError)
    with pytest.raises(RuntimeError, match="already completed"):
        f.set_result(2)
    # a queued send/recv's future runs the queue when waited on; one that stays pending
    # after that raises (nothing else will set it); a plain Future blocks as torch's does
    with pytest.raises(RuntimeError, match="not done, and nothing in this process will set it"):
        dist.Future(drive=lambda timeout: None).wait()
    with pytest.raises(TimeoutError, match="not done after 0 seconds"):
        dist.Future().wait(timeout=0)
    with pytest.raises(ValueError, match=r"must be tensorplay_jax\.distributed\.isend or irecv"):
        dist.P2POp(print, np.ones(2), 1)


def test_backend_checks_say_what_init_process_group_runs():
    # torch's CPU wheel: gloo True; nccl, mpi, ucc False (here nccl: a JAX GPU plugin)
    gpu = any(
        importlib.util.find_spec(p) is not None
        for p in ("jax_cuda13_plugin", "jax_cuda12_plugin", "jax_rocm7_plugin")
    )
    assert dist.is_gloo_available() is True and dist.is_nccl_available() is gpu
    assert dist.is_mpi_available() is False and dist.is_ucc_available() is False
    assert dist.is_backend_available("gloo") and dist.is_backend_available("GLOO")
    assert dist.is_backend_available("cpu:gloo")
    assert not dist.is_backend_available("mpi") and not dist.is_backend_available("nope")
    assert dist.is_backend_available("nccl") is gpu
