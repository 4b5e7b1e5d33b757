"""torch's values for the run of ``tests/distributed/_zero_workers.py`` (``torch_zero.npz``):
three gloo processes run it on torch; each value each rank handed back is stored by path
(``_zero_workers.flat``), and each error text under ``errors/<rank>/<case>``.

Regenerate (after changing the run)::

    PYTHONPATH=/path/to/torch:. python tests/distributed/golden/make_zero_golden.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from tests._procs import run_and_collect
from tests.distributed import _zero_workers as W

GOLDEN = Path(__file__).with_name("torch_zero.npz")


def torch_results() -> list[dict]:
    with tempfile.TemporaryDirectory() as out:
        env = {"TPJ_ZERO_ORACLE": "torch"}
        return run_and_collect(W.job, 3, Path(out), env=env, timeout=240)


def stored(results: list[dict]) -> dict[str, np.ndarray]:
    """What the golden file holds of a run: its values, and its error texts."""
    values = W.flat(results)
    for rank, got in enumerate(results):
        for case, text in got["errors"].items():
            values[f"errors/{rank}/{case}"] = np.asarray("" if text is None else text)
    return values


if __name__ == "__main__":
    values = stored(torch_results())
    np.savez_compressed(GOLDEN, **values)
    print(f"{GOLDEN}: {len(values)} values")
