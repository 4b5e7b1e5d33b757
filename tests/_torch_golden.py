"""Golden values from torch for code written once for both libraries.

A case is ``fn(m, *tensors)``, where ``m`` is the ``torch`` module or
``tensorplay_jax`` (the same names on both, as a port writes them), and its inputs as
NumPy arrays; float inputs become leaves that require grad. :func:`torch_answers` runs
cases with torch and gives their outputs (``<case>/out<i>``) and each float input's
gradient (``<case>/grad<j>``) of ``sum(out * weights(out))`` over the float outputs;
a golden file stores them, so the checks (:func:`check_case`) run without torch.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import numpy as np


class Case(NamedTuple):
    fn: Callable[..., Any]
    inputs: tuple[np.ndarray, ...]
    differentiable: bool = True  # float inputs require grad


def weights(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """The fixed cotangent for an output of ``shape``: ``cos(0), cos(1), ...``."""
    n = int(np.prod(shape))
    return np.cos(np.arange(n, dtype=np.float64)).reshape(shape).astype(dtype)


def outputs(result: Any) -> tuple[Any, ...]:
    """A case's result as a tuple of tensors."""
    return tuple(result) if isinstance(result, tuple | list) else (result,)


def _run(m: Any, name: str, case: Case) -> tuple[list[Any], tuple[Any, ...]]:
    leaves = [
        m.tensor(a, requires_grad=case.differentiable and a.dtype.kind == "f") for a in case.inputs
    ]
    outs = outputs(case.fn(m, *leaves))
    floats = [o for o in outs if o.is_floating_point() and o.requires_grad]
    if floats:
        loss = m.zeros(())
        for o in floats:
            loss = loss + (o * m.tensor(weights(tuple(o.shape), np.float32))).sum()
        loss.backward()
    return leaves, outs


def torch_answers(cases: Mapping[str, Case]) -> dict[str, np.ndarray]:
    """Every case's outputs and input gradients, computed by torch."""
    import torch

    got: dict[str, np.ndarray] = {}
    for name, case in cases.items():
        leaves, outs = _run(torch, name, case)
        got.update({f"{name}/out{i}": o.detach().numpy() for i, o in enumerate(outs)})
        for j, leaf in enumerate(leaves):
            if leaf.requires_grad:
                g = leaf.grad
                got[f"{name}/grad{j}"] = (
                    np.zeros(leaf.shape, np.float32) if g is None else g.numpy()
                )
    return got


def _kind(dtype: np.dtype) -> str:
    """The dtype's family: 64-bit integers are int32 here without JAX's 64-bit mode."""
    return {"i": "int", "u": "int", "b": "bool", "f": f"float{dtype.itemsize * 8}"}[dtype.kind]


def check_case(name: str, case: Case, stored: Mapping[str, np.ndarray]) -> None:
    """Run ``case`` with tensorplay_jax; its outputs (shape, dtype family, values) and
    gradients must be torch's, as ``stored``."""
    import tensorplay_jax as tp

    leaves, outs = _run(tp, name, case)
    assert len(outs) == sum(1 for k in stored if k.startswith(f"{name}/out"))
    for i, o in enumerate(outs):
        want, got = stored[f"{name}/out{i}"], np.asarray(o.detach().numpy())
        assert got.shape == want.shape, f"output {i}"
        assert _kind(got.dtype) == _kind(want.dtype), f"output {i}: {got.dtype} vs {want.dtype}"
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6, err_msg=f"output {i}")
        if got.dtype.kind == "f":  # a zero's sign too (torch's sign(-0.0) is +0.0, ...)
            zeros = (want == 0) & (got == 0)
            np.testing.assert_array_equal(
                np.signbit(got[zeros]), np.signbit(want[zeros]), err_msg=f"output {i}: -0.0"
            )
    for j, leaf in enumerate(leaves):
        key = f"{name}/grad{j}"
        if key in stored:
            got = np.zeros(leaf.shape, np.float32) if leaf.grad is None else leaf.grad.numpy()
            np.testing.assert_allclose(got, stored[key], rtol=1e-5, atol=1e-6, err_msg=f"grad {j}")


def by_path(results: list[dict], skip: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """Every rank's handed-back values as arrays by path (``"1/steps/2/0"``: rank, then
    keys and list positions), leaving out the top-level keys in ``skip``: what a golden
    file of a multi-process job holds, and what ours is compared with."""
    out: dict[str, np.ndarray] = {}

    def walk(path: str, value: object) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                walk(f"{path}/{key}", item)
        elif isinstance(value, list | tuple):
            for i, item in enumerate(value):
                walk(f"{path}/{i}", item)
        else:
            out[path] = np.asarray(value)

    for rank, got in enumerate(results):
        walk(str(rank), {k: v for k, v in got.items() if k not in skip})
    return out


def assert_like_torch(
    ours: Mapping[str, np.ndarray],
    theirs: Mapping[str, np.ndarray],
    pattern: str,
    rtol: float = 1e-5,
    atol: float = 1e-6,
) -> None:
    """Every value of ``ours`` whose path matches the regular expression ``pattern`` is
    torch's (floats to ``rtol`` / ``atol``, the rest exactly), and there are as many."""
    path = re.compile(pattern)
    mine = {k: v for k, v in ours.items() if path.search(k)}
    torchs = {k: v for k, v in theirs.items() if path.search(k)}
    assert mine and sorted(mine) == sorted(torchs), pattern
    for k, v in mine.items():
        if v.dtype.kind in "fc":
            np.testing.assert_allclose(v, torchs[k], rtol=rtol, atol=atol, err_msg=k)
        else:
            np.testing.assert_array_equal(v, torchs[k], err_msg=k)


def stored_cases(stored: Mapping[str, np.ndarray]) -> set[str]:
    """The names of the cases a golden file holds."""
    return {k.split("/")[0] for k in stored if "/" in k}


def write_golden(path: Any, cases: Mapping[str, Case]) -> None:
    """Store torch's answers to ``cases`` at ``path`` (a generator's ``__main__``)."""
    np.savez_compressed(path, **torch_answers(cases))
    print(f"wrote {path}")


def parity_tests(cases: Mapping[str, Case], golden: Any, maker: str) -> tuple[Any, Any, Any]:
    """The three tests of a golden file: every case has torch's answer, each case matches
    it, and (where torch is installed) the file still holds torch's values. ``maker`` is
    the generator's path, named in the message of a missing case.

    A test module assigns them to its own ``test_*`` names, so pytest collects them there.
    """
    import pytest

    stored = dict(np.load(golden))

    def test_every_case_has_torchs_answer() -> None:
        assert stored_cases(stored) == set(cases), f"regenerate: see {maker}"

    @pytest.mark.parametrize("name", sorted(cases))
    def test_values_dtypes_and_gradients_match_torch(name: str) -> None:
        check_case(name, cases[name], stored)

    def test_the_golden_file_holds_torchs_values() -> None:
        pytest.importorskip(
            "torch",
            reason="torch recomputes the golden values; without it the file is used as it is",
        )
        fresh = torch_answers(cases)
        assert sorted(fresh) == sorted(stored)
        for k, v in fresh.items():
            np.testing.assert_allclose(stored[k], v, rtol=1e-6, atol=0, err_msg=k)

    return (
        test_every_case_has_torchs_answer,
        test_values_dtypes_and_gradients_match_torch,
        test_the_golden_file_holds_torchs_values,
    )
