"""Tensor operations against torch: the cases of ``_torch_cases``, their values, dtypes and
gradients as torch 2.13 gave them (``golden/torch_ops.npz``)."""

from __future__ import annotations

from tests._torch_golden import parity_tests
from tests.tensors._torch_cases import CASES
from tests.tensors.golden.make_golden import GOLDEN

(
    test_every_case_has_torchs_answer,
    test_values_dtypes_and_gradients_match_torch,
    test_the_golden_file_holds_torchs_values,
) = parity_tests(CASES, GOLDEN, "tests/tensors/golden/make_golden.py")
