"""Distributions against torch: the cases of ``_torch_distribution_cases`` (densities,
entropies, moments, CDFs, KL divergences), their values and gradients as torch 2.13 gave
them (``golden/torch_distributions.npz``)."""

from __future__ import annotations

from tests._torch_golden import parity_tests
from tests.distributions._torch_distribution_cases import CASES
from tests.distributions.golden.make_golden import GOLDEN

(
    test_every_case_has_torchs_answer,
    test_values_dtypes_and_gradients_match_torch,
    test_the_golden_file_holds_torchs_values,
) = parity_tests(CASES, GOLDEN, "tests/distributions/golden/make_golden.py")
