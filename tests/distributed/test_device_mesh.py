"""``DeviceMesh`` on four real processes, against NumPy's layout and torch's answers.

One launch (``_device_mesh_workers.job``) lays the ranks out as 2 x 2 ("dp", "tp") and
2 x 1 x 2 meshes. Each test checks one behaviour against what a row-major
``arange(4)`` layout says, and every answer (and the class of every error) against
torch 2.13's run of the same calls (``golden/torch_device_mesh.npz``, made by
``golden/make_device_mesh_golden.py``).
"""

import numpy as np
import pytest

from tests._procs import run_and_collect
from tests._torch_golden import assert_like_torch
from tests.distributed import _device_mesh_workers as W
from tests.distributed.golden.make_device_mesh_golden import GOLDEN, stored

LAYOUT = np.arange(4).reshape(2, 2)  # rows: the "tp" groups; columns: the "dp" groups


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict]:
    """Every rank's answers from one job."""
    return run_and_collect(W.job, 4, tmp_path_factory.mktemp("mesh"), timeout=240)


@pytest.fixture(scope="module")
def torch_run() -> dict[str, np.ndarray]:
    return dict(np.load(GOLDEN))


def test_every_answer_and_error_class_is_torchs(ranks, torch_run):
    ours = stored(ranks)
    assert sorted(ours) == sorted(torch_run)
    for k, v in ours.items():
        np.testing.assert_array_equal(v, torch_run[k], err_msg=k)


def test_the_layout_is_row_major(ranks):
    for rank, got in enumerate(ranks):
        assert got["mesh"] == LAYOUT.tolist()
        assert got["layout"] == [[2, 2], 2, 4, 2, 2]
        ((row, col),) = np.argwhere(rank == LAYOUT).tolist()
        assert got["coordinate"] == [row, col]
        assert got["local_ranks"] == [row, col, rank]


def test_each_dimension_has_its_group_and_reduces_over_it(ranks):
    for rank, got in enumerate(ranks):
        row, col = np.argwhere(rank == LAYOUT)[0]
        dp, tp = LAYOUT[:, col].tolist(), LAYOUT[row].tolist()
        assert got["groups"] == got["all_groups"] == [dp, tp]
        assert got["sums"] == [float(sum(r + 1 for r in dp)), float(sum(r + 1 for r in tp))]


def test_a_slice_is_this_ranks_line_and_shares_its_group(ranks):
    for rank, got in enumerate(ranks):
        row, col = np.argwhere(rank == LAYOUT)[0]
        s = got["slices"]
        assert s["tp"] == s["tp_group"] == LAYOUT[row].tolist()
        assert s["dp"] == LAYOUT[:, col].tolist()
        assert s["same"] == LAYOUT.tolist()
        assert s["tp_local_rank"] == col
        assert got["equal"] == [True, False]
        assert got["from_group"] == LAYOUT[row].tolist()


def test_a_three_dimensional_mesh_with_a_dimension_of_one(ranks):
    layout = np.arange(4).reshape(2, 1, 2)
    for rank, got in enumerate(ranks):
        a, b, c = np.argwhere(layout == rank)[0]
        t = got["three"]
        assert t["mesh"] == layout.tolist()
        assert t["groups"] == [layout[:, b, c].tolist(), [rank], layout[a, b].tolist()]
        assert t["ac"] == layout[:, b, :].tolist()
        assert t["sum_b"] == rank + 1.0


def test_bad_calls_raise_clear_errors(ranks):
    errors = ranks[0]["errors"]
    assert errors["too_big"] == (
        "RuntimeError: Mesh should not be bigger than default world size 4, but found 8 ranks!"
    )
    assert "does not exist" in errors["unknown_name"] and "('dp', 'tp')" in errors["unknown_name"]
    two_d = errors["group_of_2d"]
    assert two_d.startswith("RuntimeError: ") and "pass mesh_dim" in two_d


def test_the_golden_file_holds_torchs_answers(torch_run):
    pytest.importorskip(
        "torch", reason="torch recomputes the golden values; without it the file is used as it is"
    )
    from tests.distributed.golden.make_device_mesh_golden import torch_results

    fresh = stored(torch_results())
    assert_like_torch(fresh, torch_run, "", rtol=0, atol=0)
