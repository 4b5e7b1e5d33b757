"""Activations, losses, distances, padding, layers, recurrent and attention modules
against torch: the cases of ``_torch_functional_cases``, their values and gradients as
torch 2.13 gave them (``golden/torch_functional.npz``)."""

from __future__ import annotations

from tests._torch_golden import parity_tests
from tests.nn._torch_functional_cases import CASES
from tests.nn.golden.make_functional_golden import GOLDEN

(
    test_every_case_has_torchs_answer,
    test_values_dtypes_and_gradients_match_torch,
    test_the_golden_file_holds_torchs_values,
) = parity_tests(CASES, GOLDEN, "tests/nn/golden/make_functional_golden.py")
