"""Learning-rate schedules against torch: the cases of ``_schedule_cases``, each group's
rate and the momentum after every step as torch 2.13 gave them
(``golden/torch_schedules.npz``; where torch is installed, a test recomputes them)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay_jax as tp
from tests.optim._schedule_cases import CASES, trajectory
from tests.optim.golden.make_schedules_golden import GOLDEN

_TORCH = dict(np.load(GOLDEN))


def test_every_case_has_torchs_trajectory() -> None:
    assert set(_TORCH) == set(CASES), "regenerate: see tests/optim/golden/make_schedules_golden.py"


@pytest.mark.parametrize("name", sorted(CASES))
def test_rates_and_momenta_follow_torchs(name: str) -> None:
    np.testing.assert_allclose(trajectory(tp, CASES[name]), _TORCH[name], rtol=1e-12, atol=1e-15)


def test_the_golden_file_holds_torchs_values() -> None:
    pytest.importorskip(
        "torch", reason="torch recomputes the golden values; without it the file is used as it is"
    )
    from tests.optim.golden.make_schedules_golden import cases

    for name, want in cases().items():
        np.testing.assert_array_equal(_TORCH[name], want, err_msg=name)
