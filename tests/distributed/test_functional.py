"""``distributed.nn.functional``: differentiable collectives on tape Tensors, in gloo groups of 2
and 4 real processes (one job per size, driven from this process).

Oracles, both independent of the package: (1) the numpy references in
``tests/collectives/_reference.py`` for the values and central finite differences, in
float64, of the whole multi-rank loss ``sum_r sum(sin(y_r))`` for the gradients (every
rank's input ``1 + rank + noise`` is known here); (2) where torch is installed,
``torch.distributed.nn.functional`` on gloo given the same inputs.
"""

from __future__ import annotations

import numpy as np
import pytest

from tensorplay_jax.testing import Workers
from tests._procs import free_port, run_workers
from tests.distributed import _functional_workers as W

# One CPU device per group member, as in a real job.
_ENV = {"XLA_FLAGS": "--xla_force_host_platform_device_count=1"}


@pytest.fixture(scope="module", params=[2, 4], ids=lambda n: f"{n}procs")
def group(request):
    """``(n, job)``: a job of ``n + 1`` workers whose ``n`` started ones form a gloo group."""
    n = request.param
    job = Workers(n + 1, timeout=120, env=_ENV).start()
    try:
        ranks = job.run_all(W.init_group, free_port(), n)
        assert sorted(r for r in ranks.values() if r is not None) == list(range(n)), ranks
        yield n, job
        job.run_all(W.destroy_group)
    finally:
        job.close()


def _members(results: dict) -> list:
    """The members' results in group-rank order (rank 0 of the job is not a member)."""
    return [v for k, v in results.items() if k != "worker0"]


def _finite_differences(x, loss64, h=1e-6):
    """d loss64(x) / d x by central differences, float64 (``loss64`` sees a perturbed copy)."""
    want = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        up, dn = x.copy(), x.copy()
        up[i] += h
        dn[i] -= h
        want[i] = (loss64(up) - loss64(dn)) / (2 * h)
    return want


@pytest.mark.parametrize("name", W.CASE_NAMES)
def test_values_and_gradients_against_numpy_and_finite_differences(group, name):
    n, job = group
    ref = W.cases(n, 0)[name][2]
    xs = W.case_inputs(name, n)
    got = _members(job.run_all(W.run_case, name))
    want_y = ref(xs)
    for r, (y, grad) in enumerate(got):
        np.testing.assert_allclose(y, want_y[r], rtol=1e-5, atol=1e-5, err_msg=f"rank {r} value")
        want = _finite_differences(
            xs[r], lambda v, r=r: sum(np.sin(o).sum() for o in ref([*xs[:r], v, *xs[r + 1 :]]))
        )
        np.testing.assert_allclose(
            np.asarray(grad, np.float64), want, rtol=2e-4, atol=2e-4, err_msg=f"rank {r} grad"
        )


@pytest.mark.parametrize("name", W.LIST_CASE_NAMES)
def test_list_forms_values_and_every_elements_gradient(group, name):
    n, job = group
    ref = W.list_cases(n, 0)[name][2]
    xs = W.list_case_inputs(name, n)
    want_ys = ref(xs)

    def loss64(rank_lists):
        return sum(np.sin(y).sum() for ys in ref(rank_lists) for y in ys)

    for r, (kind, ys, grads) in enumerate(_members(job.run_all(W.run_list_case, name))):
        if name.startswith("all_to_all"):
            assert kind == "tuple", (r, kind)
        assert len(ys) == len(want_ys[r]), (r, len(ys), len(want_ys[r]))
        for j, (y, w) in enumerate(zip(ys, want_ys[r], strict=True)):
            np.testing.assert_allclose(y, w, rtol=1e-5, atol=1e-5, err_msg=f"rank {r} output {j}")
        for i, grad in enumerate(grads):  # every list element's gradient
            mine = xs[r]
            want = _finite_differences(
                mine[i],
                lambda v, r=r, i=i, mine=mine: loss64(
                    [*xs[:r], [*mine[:i], v, *mine[i + 1 :]], *xs[r + 1 :]]
                ),
            )
            np.testing.assert_allclose(
                np.asarray(grad, np.float64), want, rtol=2e-4, atol=2e-4, err_msg=f"rank {r}[{i}]"
            )


@pytest.mark.parametrize(
    "which, words",
    [
        ("too-many-tensors", "holds {n_plus_1} tensors but the group has {n}"),
        ("scatter-none-on-src", "tensors=None on src"),
        ("shapes-differ", "differ in shape"),
    ],
)
def test_list_form_errors_name_the_problem_on_every_rank(group, which, words):
    n, job = group
    expected = words.format(n=n, n_plus_1=n + 1)
    for r, msg in enumerate(_members(job.run_all(W.list_form_error, which))):
        assert expected in msg, (r, msg)
        assert msg.startswith(("ValueError", "TypeError")), (r, msg)


def test_gradients_match_torch(group, tmp_path):
    pytest.importorskip("torch", reason="torch is not installed: checked against numpy only")
    n, job = group
    run_workers(W.torch_reference, n, args=[str(tmp_path)], timeout=300)
    for name in np.load(tmp_path / "torch-0.npz").files:
        for r, (_, ours) in enumerate(_members(job.run_all(W.run_case, name))):
            ref = np.load(tmp_path / f"torch-{r}.npz")[name]
            np.testing.assert_allclose(
                ours, ref, rtol=1e-4, atol=1e-5, err_msg=f"{name} rank {r} vs torch"
            )
