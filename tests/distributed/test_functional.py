"""``distributed.nn.functional``: differentiable collectives on tape Tensors, 2 and 4 real
processes over the process group.

Oracles, both independent of the package: (1) central finite differences, in
float64, of the whole multi-rank loss ``sum_r sum(sin(y_r))`` built from the numpy
references in ``tests/collectives/_reference.py`` (every rank knows every rank's
input ``1 + rank + noise``); (2) where torch is installed, ``torch.distributed.nn.functional``
on gloo given the same inputs in the same test run.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests._procs import run_workers
from tests.distributed import _functional_workers as W


@pytest.mark.parametrize("nprocs", [2, 4])
def test_values_and_gradients_against_finite_differences_and_torch(nprocs, tmp_path):
    results = run_workers(W.ours, nprocs, args=[str(tmp_path)], timeout=400)
    assert all("functions OK" in w.stdout for w in results), "\n".join(map(str, results))
    try:
        import torch  # noqa: F401
    except ImportError:
        pytest.skip("torch is not installed: checked against finite differences only")
    run_workers(W.torch_reference, nprocs, args=[str(tmp_path)], timeout=300)
    for r in range(nprocs):
        ours, ref = np.load(tmp_path / f"ours-{r}.npz"), np.load(tmp_path / f"torch-{r}.npz")
        for name in ref.files:
            np.testing.assert_allclose(
                ours[name], ref[name], rtol=1e-4, atol=1e-5, err_msg=f"{name} rank {r} vs torch"
            )


@pytest.mark.parametrize("nprocs", [2, 4])
def test_list_forms_values_and_every_elements_gradient(nprocs, tmp_path):
    results = run_workers(W.list_forms, nprocs, args=[str(tmp_path)], timeout=400)
    assert all("list forms OK" in w.stdout for w in results), "\n".join(map(str, results))
