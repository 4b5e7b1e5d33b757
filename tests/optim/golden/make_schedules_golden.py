"""torch's trajectories for the cases of ``tests/optim/_schedule_cases.py``
(``torch_schedules.npz``).

Regenerate (after changing a case)::

    PYTHONPATH=/path/to/torch:. python tests/optim/golden/make_schedules_golden.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.optim._schedule_cases import CASES, trajectory

GOLDEN = Path(__file__).with_name("torch_schedules.npz")


def cases() -> dict[str, np.ndarray]:
    """Every case's trajectory, computed by torch."""
    import torch

    return {name: trajectory(torch, case) for name, case in CASES.items()}


if __name__ == "__main__":
    np.savez_compressed(GOLDEN, **cases())
    print(f"wrote {GOLDEN}")
