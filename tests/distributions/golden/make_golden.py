"""torch's answers to the cases of ``tests/distributions/_torch_distribution_cases.py``
(``torch_distributions.npz``); what each case stores is said in ``tests/_torch_golden.py``.

Regenerate (after changing a case)::

    PYTHONPATH=/path/to/torch:. python tests/distributions/golden/make_golden.py
"""

from __future__ import annotations

from pathlib import Path

from tests._torch_golden import write_golden
from tests.distributions._torch_distribution_cases import CASES

GOLDEN = Path(__file__).with_name("torch_distributions.npz")

if __name__ == "__main__":
    write_golden(GOLDEN, CASES)
