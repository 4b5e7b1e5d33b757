"""torch's answers to the tensor-operation cases of ``tests/tensors/_torch_cases.py``
(``torch_ops.npz``); what each case stores is said in ``tests/_torch_golden.py``, and
``test_torch_parity.py`` checks ours against the file (where torch is installed, it
recomputes it too).

Regenerate (after changing a case)::

    PYTHONPATH=/path/to/torch:. python tests/tensors/golden/make_golden.py
"""

from __future__ import annotations

from pathlib import Path

from tests._torch_golden import write_golden
from tests.tensors._torch_cases import CASES

GOLDEN = Path(__file__).with_name("torch_ops.npz")

if __name__ == "__main__":
    write_golden(GOLDEN, CASES)
