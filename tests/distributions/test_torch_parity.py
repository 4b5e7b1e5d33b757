"""Distributions against torch: the cases of ``_torch_distribution_cases`` (densities,
entropies, moments, CDFs, KL divergences), their values and gradients as torch 2.13 gave
them (``golden/torch_distributions.npz``; where torch is installed, a test recomputes
them)."""

from __future__ import annotations

import numpy as np
import pytest

from tests._torch_golden import check_case, stored_cases
from tests.distributions._torch_distribution_cases import CASES
from tests.distributions.golden.make_golden import GOLDEN

_TORCH = dict(np.load(GOLDEN))


def test_every_case_has_torchs_answer() -> None:
    assert stored_cases(_TORCH) == set(CASES), "regenerate: see golden/make_golden.py"


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_dtypes_and_gradients_match_torch(name: str) -> None:
    check_case(name, CASES[name], _TORCH)


def test_the_golden_file_holds_torchs_values() -> None:
    pytest.importorskip(
        "torch", reason="torch recomputes the golden values; without it the file is used as it is"
    )
    from tests.distributions.golden.make_golden import cases

    fresh = cases()
    assert sorted(fresh) == sorted(_TORCH)
    for k, v in fresh.items():
        np.testing.assert_allclose(_TORCH[k], v, rtol=1e-6, atol=0, err_msg=k)
