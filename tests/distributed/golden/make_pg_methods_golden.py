"""torch's values for the calls of ``tests/distributed/_pg_method_workers.py``
(``torch_pg_methods.npz``): three gloo processes run them on torch, and each value
each rank wrote is stored by path (``_pg_method_workers.flat``).

Regenerate (after changing a call)::

    PYTHONPATH=/path/to/torch:. python tests/distributed/golden/make_pg_methods_golden.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from tests._procs import run_and_collect
from tests.distributed import _pg_method_workers as W

GOLDEN = Path(__file__).with_name("torch_pg_methods.npz")


def torch_values() -> dict[str, np.ndarray]:
    with tempfile.TemporaryDirectory() as out:
        env = {"TPJ_PG_ORACLE": "torch"}
        return W.flat(run_and_collect(W.methods, 3, Path(out), env=env, timeout=240))


if __name__ == "__main__":
    values = torch_values()
    np.savez_compressed(GOLDEN, **values)
    print(f"{GOLDEN}: {len(values)} values")
