"""Post-local SGD and model averaging on four real processes, against torch's.

One launch (``_dist_optim_workers.post_local_job``) trains under DDP with
``post_localSGD_hook`` (subgroups {0, 1} and {2, 3}) and ``PostLocalSGDOptimizer``
(``PeriodicModelAverager(period=2, warmup_steps=2)``), with and without the subgroup's
gradient averaging, steps locally with a ``HierarchicalModelAverager`` (pairs every 2
steps, all four every 4), then averages parameters with ``model_averaging.utils``. Each test
checks one behaviour: which ranks agree after which step, the mean against NumPy, and
every value, warning and error against torch 2.13's run of the same calls
(``golden/torch_post_local_sgd.npz``, made by ``golden/make_dist_optim_golden.py``).
"""

import numpy as np
import pytest

from tests._procs import run_and_collect
from tests._torch_golden import assert_like_torch
from tests.distributed import _dist_optim_workers as W
from tests.distributed.golden.make_dist_optim_golden import POST_LOCAL, stored

MODES = ("subgroup_allreduce", "no_allreduce_after")


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict]:
    """Every rank's results of one job."""
    return run_and_collect(W.post_local_job, 4, tmp_path_factory.mktemp("post-local"), timeout=240)


@pytest.fixture(scope="module")
def torch_run() -> dict[str, np.ndarray]:
    return dict(np.load(POST_LOCAL))


def _equal(a: list, b: list) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def _like_torch(ranks, torch_run, pattern: str) -> None:
    assert_like_torch(stored(ranks), torch_run, pattern)


def test_warm_up_steps_and_averaging_steps_leave_every_rank_equal(ranks):
    # steps 0, 1: gradients averaged across all four; steps 2, 4: parameters averaged
    for mode in MODES:
        for step in (0, 1, 2, 4):
            for got in ranks[1:]:
                assert _equal(got[mode]["steps"][step], ranks[0][mode]["steps"][step]), (mode, step)


def test_between_averagings_the_subgroups_step_apart(ranks):
    for step in (3, 5):
        steps = [got["subgroup_allreduce"]["steps"][step] for got in ranks]
        assert _equal(steps[0], steps[1]) and _equal(steps[2], steps[3])
        assert not _equal(steps[0], steps[2])
        alone = [got["no_allreduce_after"]["steps"][step] for got in ranks]
        assert not _equal(alone[0], alone[1])  # each rank its own gradients


@pytest.mark.parametrize("mode", MODES)
def test_each_step_gives_torchs_values(ranks, torch_run, mode):
    _like_torch(ranks, torch_run, rf"^\d+/{mode}/steps/")


def test_the_hook_and_the_averager_count_steps_as_torchs(ranks, torch_run):
    for got in ranks:
        for mode in MODES:
            assert (got[mode]["iter"], got[mode]["averager_step"]) == (2, 6)
    _like_torch(ranks, torch_run, r"^\d+/\w+/(iter|averager_step)$")


def test_average_parameters_gives_the_mean_and_keeps_a_parameter_without_gradient(ranks, torch_run):
    mean = np.mean([W.init(k, (3, 2)) for k in range(4)], axis=0)
    for rank, got in enumerate(ranks):
        np.testing.assert_allclose(got["averaged"], mean, rtol=1e-6)
        np.testing.assert_array_equal(got["kept"], W.init(10 + rank, (2,)))
    _like_torch(ranks, torch_run, r"^\d+/(averaged|kept)$")


def test_the_hierarchical_averager_averages_pairs_then_all_four(ranks, torch_run):
    # step 0: warm-up; 1: no period divides it; 2: pairs {0, 1}, {2, 3}; 4: all four
    steps = [got["hierarchical"] for got in ranks]
    assert not _equal(steps[0][1], steps[1][1])
    assert _equal(steps[0][2], steps[1][2]) and _equal(steps[2][2], steps[3][2])
    assert not _equal(steps[0][2], steps[2][2])
    assert all(_equal(steps[0][4], s[4]) for s in steps[1:])
    _like_torch(ranks, torch_run, r"^\d+/hierarchical/")


def test_warnings_and_errors_are_torchs(ranks, torch_run):
    for got in ranks:
        assert got["warnings"]["load_without_step"] == [
            "UserWarning: Loaded state dict does not contain a step counter for an averager. "
            "Setting step counter to 0."
        ]
        assert got["errors"]["period_0"] == "ValueError: Arg ``period`` must be a positive value."
    _like_torch(ranks, torch_run, r"^(warnings|errors)/")


def test_the_golden_file_holds_torchs_values(torch_run):
    pytest.importorskip(
        "torch", reason="torch recomputes the golden values; without it the file is used as it is"
    )
    from tests.distributed.golden.make_dist_optim_golden import torch_results

    fresh = stored(torch_results(POST_LOCAL))
    assert_like_torch(fresh, torch_run, "", rtol=1e-6, atol=0)
