"""torch's values for the jobs of ``tests/distributed/_dist_optim_workers.py``: ``job``
(``ZeroRedundancyOptimizer``, three gloo processes, ``torch_zero.npz``) and
``post_local_job`` (post-local SGD and model averaging, four processes,
``torch_post_local_sgd.npz``). Each value each rank handed back is stored by path
(``_dist_optim_workers.flat``), and each error or warning text under
``errors/<rank>/<case>`` or ``warnings/<rank>/<case>``.

Regenerate (after changing a job)::

    PYTHONPATH=/path/to/torch:. python tests/distributed/golden/make_dist_optim_golden.py
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from tests._procs import run_and_collect
from tests.distributed import _dist_optim_workers as W

HERE = Path(__file__).parent
ZERO = HERE / "torch_zero.npz"
POST_LOCAL = HERE / "torch_post_local_sgd.npz"
JOBS: dict[Path, tuple[Callable[[], None], int]] = {
    ZERO: (W.job, 3),
    POST_LOCAL: (W.post_local_job, 4),
}


def torch_results(golden: Path) -> list[dict]:
    """``golden``'s job run on torch: each rank's results."""
    script, ranks = JOBS[golden]
    with tempfile.TemporaryDirectory() as out:
        env = {"TPJ_OPTIM_ORACLE": "torch"}
        return run_and_collect(script, ranks, Path(out), env=env, timeout=240)


def stored(results: list[dict]) -> dict[str, np.ndarray]:
    """What a golden file holds of a run: its values, its error and warning texts."""
    values = W.flat(results)
    for rank, got in enumerate(results):
        for kind in ("errors", "warnings"):
            for case, text in got.get(kind, {}).items():
                values[f"{kind}/{rank}/{case}"] = np.asarray("" if text is None else text)
    return values


if __name__ == "__main__":
    for golden in JOBS:
        values = stored(torch_results(golden))
        np.savez_compressed(golden, **values)
        print(f"{golden}: {len(values)} values")
