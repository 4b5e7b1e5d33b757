"""How many inputs each fuzzer tries: a short deterministic run in CI, a long one on demand.

``TPJ_FUZZ_EXAMPLES=N`` (e.g. 100000) makes every fuzzer try ``N`` inputs,
drawn at random (a new seed each run; a failure prints how to reproduce it).
Unset, each tries its small CI count, derandomized (the same inputs every run).
``scripts/fuzz.sh`` runs the long mode and prints each entry point's count and time.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings

EXAMPLES_ENV = "TPJ_FUZZ_EXAMPLES"


def long_run() -> bool:
    """Whether ``TPJ_FUZZ_EXAMPLES`` asks for the long mode."""
    return bool(os.environ.get(EXAMPLES_ENV))


def fuzz(ci: int) -> settings:
    """Hypothesis settings for a fuzzer that tries ``ci`` inputs in CI."""
    n = int(os.environ.get(EXAMPLES_ENV) or ci)
    return settings(
        max_examples=n,
        deadline=None,  # a slow input under load is no failure; a hang is (pytest-timeout)
        database=None,
        derandomize=not long_run(),
        suppress_health_check=list(HealthCheck),
        # Shrinking a failure of a long run can take long: it stops after this many tries.
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
        report_multiple_bugs=False,
    )
