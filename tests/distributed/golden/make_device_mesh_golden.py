"""torch's answers for ``tests/distributed/_device_mesh_workers.py`` (``torch_device_mesh.npz``):
four gloo processes run the job on torch; each value each rank handed back is stored by
path (``_device_mesh_workers.flat``), and each error's class under ``errors/<rank>/<case>``.

Regenerate (after changing the job)::

    PYTHONPATH=/path/to/torch:. python tests/distributed/golden/make_device_mesh_golden.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from tests._procs import run_and_collect
from tests.distributed import _device_mesh_workers as W

GOLDEN = Path(__file__).with_name("torch_device_mesh.npz")


def torch_results() -> list[dict]:
    with tempfile.TemporaryDirectory() as out:
        env = {"TPJ_MESH_ORACLE": "torch"}
        return run_and_collect(W.job, 4, Path(out), env=env, timeout=240)


def stored(results: list[dict]) -> dict[str, np.ndarray]:
    """A run's values, and the class of each error it raised (torch's messages are its own)."""
    values = W.flat(results)
    for rank, got in enumerate(results):
        for case, text in got["errors"].items():
            values[f"errors/{rank}/{case}"] = np.asarray("" if text is None else text.split(":")[0])
    return values


if __name__ == "__main__":
    values = stored(torch_results())
    np.savez_compressed(GOLDEN, **values)
    print(f"{GOLDEN}: {len(values)} values")
