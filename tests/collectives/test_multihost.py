"""All ten collectives across 2 real OS processes: ``jax.distributed.initialize``, CPU
collectives over gloo, one global mesh of 4 devices (2 per process).

Each process knows the whole (seeded) global input, so it checks its own shards of
the output and of the gradient against the numpy reference and its dense Jacobian.
"""

from __future__ import annotations

import pytest

from tests.collectives import _multihost_workers as W


@pytest.mark.timeout(600)
def test_all_collectives_across_two_processes(workers):
    results = workers(W.all_collectives, 2, devices_per_process=2, timeout=500)
    for r in results:
        assert "cases OK" in r.stdout, str(r)
