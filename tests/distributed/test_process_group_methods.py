"""c10d's methods of a group object, on three real processes: ``pg.allreduce([t]).wait()``.

Ranks given to a method are group ranks: most calls run on the group of global
ranks 1 and 2 (group ranks 0 and 1). One launch per engine runs every call
(``_pg_method_workers.methods``); each test checks one behaviour against numpy
computed from the ranks' inputs, or the error a bad call raised; and every value
written is the one torch 2.13's gloo wrote for the same calls
(``golden/torch_pg_methods.npz``, made by ``golden/make_pg_methods_golden.py``).
"""

import numpy as np
import pytest

from tests._procs import run_and_collect
from tests.distributed import _pg_method_workers as W
from tests.distributed._pg_method_workers import mine
from tests.distributed.golden.make_pg_methods_golden import GOLDEN

G = (1, 2)  # the group's members, by group rank


@pytest.fixture(scope="module", params=["shm", "tcp"])
def ranks(request, tmp_path_factory) -> list[dict]:
    """Every rank's results of one ``methods`` job on the given engine."""
    out = tmp_path_factory.mktemp(f"methods-{request.param}")
    return run_and_collect(W.methods, 3, out, args=[request.param], timeout=240)


def _close(got, want) -> None:
    got = np.asarray(got)
    assert got.shape == np.shape(want), (got.shape, np.shape(want))
    np.testing.assert_allclose(got, want, rtol=1e-6)


def _raised(text, kind: str, *parts: str) -> None:
    assert text is not None and text.startswith(kind + ": "), text
    for part in parts:
        assert part in text, (part, text)


def test_the_world_group_reduces_in_place_in_every_form(ranks):
    every = [mine(k) for k in range(3)]
    for got in ranks:
        w = got["world"]
        _close(w["allreduce"], sum(every))
        assert w["allreduce/work"] == [True, True, True]  # wait, is_completed, result is [t]
        _close(w["allreduce/max"], np.max(every, axis=0))
        _close(w["allreduce/opts_prod"], np.prod(every, axis=0))


def test_several_tensors_are_reduced_together_and_each_gets_the_result(ranks):
    # tensorplay's gloo: every tensor of every rank in one reduction.
    total = sum(mine(k) + mine(k + 3) for k in range(3))
    for got in ranks:
        a, b = got["world"]["allreduce/two"]
        _close(a, total)
        _close(b, total)


def test_allreduce_coalesced_reduces_each_tensor(ranks):
    for got in ranks:
        a, b = got["world"]["allreduce_coalesced"]
        _close(a, sum(mine(k) for k in range(3)))
        _close(b, sum(mine(k, (4,)) for k in range(3)))


def test_names_and_barrier(ranks):
    for got in ranks:
        # the default group and the pair, on members and not; none after destroy
        assert (got["pg_count"], got["pg_count/destroyed"]) == (2, 0)
        w = got["world"]
        assert (w["name"], w["group_name"]) == ("gloo", "0")
        assert w["barrier"] == [True, True]
    for r in G:
        assert ranks[r]["sub"]["group_name"] == "1"
        assert ranks[r]["sub"]["rank_size"] == [G.index(r), 2]


def test_broadcast_takes_a_group_rank_and_a_root_tensor(ranks):
    for r in G:
        got = ranks[r]["sub"]
        _close(got["broadcast"], mine(2))  # group rank 1 is global rank 2
        # rootRank 0 (global 1), its second tensor, into both tensors of every rank
        for p in got["broadcast/root_tensor"]:
            _close(p, mine(1 + 3))


def test_reduce_lands_on_the_group_root_only(ranks):
    total = mine(1) + mine(2)
    _close(ranks[1]["sub"]["reduce"], total)  # group rank 0
    _close(ranks[2]["kept"]["reduce"], mine(2))  # unchanged
    _close(ranks[2]["sub"]["reduce/opts_max"], np.maximum(mine(1), mine(2)))
    _close(ranks[1]["kept"]["reduce/opts_max"], mine(1))


def test_allgather_in_both_forms_and_into_one_tensor(ranks):
    for r in G:
        got = ranks[r]["sub"]
        nested, flat = got["allgather"]
        _close(nested, [mine(1), mine(2)])
        _close(flat, [mine(1), mine(2)])
        _close(got["_allgather_base"], np.concatenate([mine(1), mine(2)]))


def test_gather_fills_the_root_s_outputs(ranks):
    _close(ranks[2]["sub"]["gather"], [mine(1), mine(2)])  # root: group rank 1
    assert ranks[1]["sub"]["gather"] == []
    _close(ranks[1]["sub"]["gather/opts"], [mine(1), mine(2)])  # GatherOptions: rootRank 0
    assert ranks[2]["sub"]["gather/opts"] == []


def test_scatter_sends_each_rank_its_slot_from_the_root(ranks):
    _close(ranks[1]["sub"]["scatter"], mine(10))
    _close(ranks[2]["sub"]["scatter"], mine(20))


def test_reduce_scatter_in_both_forms_and_from_one_tensor(ranks):
    for me, r in enumerate(G):
        plain, maxed = ranks[r]["sub"]["reduce_scatter"]
        slots = [[mine(k), mine(k + 3)][me] for k in G]
        _close(plain, sum(slots))
        _close(maxed, np.max(slots, axis=0))
        rows = sum(mine(k, (4, 3)) for k in G)[2 * me : 2 * me + 2]
        _close(ranks[r]["sub"]["_reduce_scatter_base"], rows)


def test_alltoall_and_alltoall_base_even_and_uneven(ranks):
    for me, r in enumerate(G):
        got = ranks[r]["sub"]
        _close(got["alltoall"], [[mine(k), mine(k + 3)][me] for k in G])
        even, uneven = got["alltoall_base"]
        _close(even, np.concatenate([mine(k, (4, 3))[2 * me : 2 * me + 2] for k in G]))
        # group rank 0 sends rows [0:1] to itself and [1:4] to rank 1; rank 1 [0:2] and [2:4]
        a, b = mine(1, (4, 3)), mine(2, (4, 3))
        want = np.concatenate([a[0:1], b[0:2]]) if me == 0 else np.concatenate([a[1:4], b[2:4]])
        _close(uneven, want)


def test_send_and_recv_take_group_ranks_and_recv_names_its_source(ranks):
    assert ranks[1]["sub"]["send"] is True
    into, source = ranks[2]["sub"]["recv"]
    _close(into, mine(1))
    assert source == 0


def test_bad_calls_say_what_is_wrong(ranks):
    for got in ranks:
        e = got["errors"]
        _raised(e["timeout"], "NotImplementedError", "per-call timeout", "new_group")
        _raised(e["array"], "TypeError", "tensorplay_jax Tensors", "got ndarray")
        _raised(e["two_shapes"], "RuntimeError", "invalid tensor at index 1", "(4,)")
        _raised(e["empty"], "RuntimeError", "non-empty tensor list")
        _raised(e["source_rank"], "RuntimeError", "ProcessGroup.recv")
        _raised(e["other_options"], "TypeError", "expected AllreduceOptions")
    for r in G:
        e = ranks[r]["errors"]
        _raised(e["root"], "RuntimeError", "broadcast: invalid root rank: 2", "0..1")
        _raised(e["two_for_reduce"], "RuntimeError", "single-element tensor list")
        _raised(e["gather_length"], "RuntimeError", "expected length 2, got 1")
        _raised(e["send_rank"], "RuntimeError", "invalid destination rank: 2")
        _raised(e["op_twice"], "TypeError", "not both")
    _raised(ranks[0]["errors"]["non_member"], "RuntimeError", "global rank 0 is not a member")


def test_nothing_is_lost_after_the_refused_calls(ranks):
    for got in ranks:
        _close(got["after_errors"], sum(mine(k) for k in range(3)))


def test_every_value_is_what_torch_s_gloo_wrote(ranks):
    golden = np.load(GOLDEN)
    ours = W.flat(ranks)
    # Every call has torch's answer (a new call needs the golden file made again).
    assert sorted(ours) == sorted(golden.files)
    for key in golden.files:
        want, got = golden[key], ours[key]
        if want.dtype.kind == "f":
            np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=key)
        else:
            assert got.tolist() == want.tolist(), (key, got, want)
