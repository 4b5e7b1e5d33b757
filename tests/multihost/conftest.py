"""The multi-host tests' fixtures: one simulated cluster per test module, and its runner."""

from __future__ import annotations

import functools
from collections.abc import Iterator

import pytest

from tensorplay_jax.testing import netns
from tests._procs import run_on_hosts

HOSTS = 3  # the fault tests use three; the others use hosts 0 and 1


@pytest.fixture(scope="module")
def cluster() -> Iterator[netns.Cluster]:
    """``HOSTS`` simulated hosts at 198.18.0.1, .2, ... (skips where they cannot be built)."""
    why = netns.unavailable()
    if why:
        pytest.skip(f"multi-host tests: {why}")
    with netns.Cluster(HOSTS) as c:
        yield c


@pytest.fixture
def on_hosts(cluster: netns.Cluster):
    """``on_hosts(script, hosts, ...)``: ``tests._procs.run_on_hosts`` on this module's cluster."""
    return functools.partial(run_on_hosts, cluster)
