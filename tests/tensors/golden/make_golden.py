"""torch's answers to the tensor-operation cases of ``tests/tensors/_torch_cases.py``
(``torch_ops.npz``).

What each case stores is said in ``tests/_torch_golden.py``; nothing of tensorplay_jax
runs here. ``tests/tensors/test_torch_parity.py`` checks ours against
the file, so it runs where torch is not installed; where it is, a test recomputes
:func:`cases` and checks that the file still holds torch's values.

Regenerate (after changing a case)::

    PYTHONPATH=/path/to/torch:. python tests/tensors/golden/make_golden.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests._torch_golden import torch_answers
from tests.tensors._torch_cases import CASES

GOLDEN = Path(__file__).with_name("torch_ops.npz")


def cases() -> dict[str, np.ndarray]:
    """Every case's outputs and gradients, computed by torch."""
    return torch_answers(CASES)


if __name__ == "__main__":
    np.savez_compressed(GOLDEN, **cases())
    print(f"wrote {GOLDEN}")
