"""torch's values for ``tests/distributed/_comm_hook_workers.py``'s ``job`` (DDP's
communication hooks, three gloo processes): ``torch_comm_hooks.npz``. Each value each
rank handed back is stored by path (``_comm_hook_workers.flat``), and each error text
under ``errors/<rank>/<case>``.

Regenerate (after changing the job)::

    PYTHONPATH=/path/to/torch:. python tests/distributed/golden/make_comm_hook_golden.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from tests._procs import run_and_collect
from tests.distributed import _comm_hook_workers as W

GOLDEN = Path(__file__).parent / "torch_comm_hooks.npz"
RANKS = 3  # a world size that is not a power of two: the divisions round


def torch_results() -> list[dict]:
    """The job run on torch: each rank's results."""
    with tempfile.TemporaryDirectory() as out:
        env = {"TPJ_HOOK_ORACLE": "torch"}
        return run_and_collect(W.job, RANKS, Path(out), env=env, timeout=240)


def stored(results: list[dict]) -> dict[str, np.ndarray]:
    """What the golden file holds of a run: its values and its error texts."""
    values = W.flat(results)
    for rank, got in enumerate(results):
        for case, text in got["errors"].items():
            values[f"errors/{rank}/{case}"] = np.asarray("" if text is None else text)
    return values


if __name__ == "__main__":
    values = stored(torch_results())
    np.savez_compressed(GOLDEN, **values)
    print(f"{GOLDEN}: {len(values)} values")
