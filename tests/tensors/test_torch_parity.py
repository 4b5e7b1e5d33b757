"""Tensor operations against torch: the cases of ``_torch_cases``, their values, dtypes and
gradients as torch 2.13 gave them (``golden/torch_ops.npz``, written by
``golden/make_golden.py``; where torch is installed, a test recomputes them)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay_jax as tp
from tests.tensors._torch_cases import CASES, outputs, weights
from tests.tensors.golden.make_golden import GOLDEN

_TORCH = dict(np.load(GOLDEN))


def _kind(dtype: np.dtype) -> str:
    """The dtype's family: 64-bit integers are int32 here without JAX's 64-bit mode."""
    return {"i": "int", "u": "int", "b": "bool", "f": f"float{dtype.itemsize * 8}"}[dtype.kind]


def test_every_case_has_torchs_answer() -> None:
    stored = {k.split("/")[0] for k in _TORCH if "/" in k}
    assert stored == set(CASES), (
        "rerun: PYTHONPATH=<torch>:. python tests/tensors/golden/make_golden.py"
    )


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_dtypes_and_gradients_match_torch(name: str) -> None:
    case = CASES[name]
    leaves = [
        tp.tensor(a, requires_grad=case.differentiable and a.dtype.kind == "f") for a in case.inputs
    ]
    outs = outputs(case.fn(tp, *leaves))
    n_out = sum(1 for k in _TORCH if k.startswith(f"{name}/out"))
    assert len(outs) == n_out
    for i, o in enumerate(outs):
        want = _TORCH[f"{name}/out{i}"]
        got = np.asarray(o.detach().numpy())
        assert got.shape == want.shape, f"output {i}"
        assert _kind(got.dtype) == _kind(want.dtype), f"output {i}: {got.dtype} vs {want.dtype}"
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6, err_msg=f"output {i}")
    floats = [o for o in outs if o.is_floating_point() and o.requires_grad]
    if floats:
        loss = tp.zeros(())
        for o in floats:
            loss = loss + (o * tp.tensor(weights(tuple(o.shape), np.float32))).sum()
        loss.backward()
    for j, leaf in enumerate(leaves):
        key = f"{name}/grad{j}"
        if key not in _TORCH:
            continue
        got = np.zeros(leaf.shape, np.float32) if leaf.grad is None else leaf.grad.numpy()
        np.testing.assert_allclose(got, _TORCH[key], rtol=1e-5, atol=1e-6, err_msg=f"grad {j}")


def test_the_golden_file_holds_torchs_values() -> None:
    pytest.importorskip(
        "torch", reason="torch recomputes the golden values; without it the file is used as it is"
    )
    from tests.tensors.golden.make_golden import cases

    fresh = cases()
    assert sorted(fresh) == sorted(_TORCH)
    for k, v in fresh.items():
        np.testing.assert_allclose(_TORCH[k], v, rtol=1e-6, atol=0, err_msg=k)
