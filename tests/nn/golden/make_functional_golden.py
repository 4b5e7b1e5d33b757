"""torch's answers to the cases of ``tests/nn/_torch_functional_cases.py``
(``torch_functional.npz``); what each case stores is said in ``tests/_torch_golden.py``.

Regenerate (after changing a case)::

    PYTHONPATH=/path/to/torch:. python tests/nn/golden/make_functional_golden.py
"""

from __future__ import annotations

from pathlib import Path

from tests._torch_golden import write_golden
from tests.nn._torch_functional_cases import CASES

GOLDEN = Path(__file__).with_name("torch_functional.npz")

if __name__ == "__main__":
    write_golden(GOLDEN, CASES)
