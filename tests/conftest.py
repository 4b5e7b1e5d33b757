"""Test-wide setup: 8 virtual CPU devices, and the shared fixtures every package's tests use."""

import os

# Must happen before JAX is imported anywhere in the test process.
_flags = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in _flags:
    os.environ["XLA_FLAGS"] = (_flags + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import pytest  # noqa: E402

from tests._procs import free_port, run_workers  # noqa: E402


def pytest_configure(config):
    # Our own tests use the tensorplay_jax pytest plugin (dist_workers, @pytest.mark.workers).
    # An installed package loads it through its pytest11 entry point; from a checkout that is
    # not installed, register it here under the same name, unless it is there already (e.g.
    # ``-p tensorplay_jax_pytest``) or disabled (``-p no:tensorplay_jax``).
    import tensorplay_jax_pytest

    pm = config.pluginmanager
    if not (
        pm.is_registered(tensorplay_jax_pytest)
        or pm.has_plugin("tensorplay_jax")
        or pm.is_blocked("tensorplay_jax")
    ):
        pm.register(tensorplay_jax_pytest, "tensorplay_jax")


@pytest.fixture
def port() -> int:
    """A free TCP port on loopback."""
    return free_port()


@pytest.fixture
def workers():
    """``workers(script, nprocs, ...)``: run ``script`` in N OS processes (``tests._procs``)."""
    return run_workers


# Tests that start worker processes are marked to share one xdist worker (``--dist
# loadgroup``), so that at most one multi-process job runs at a time. NOTE: with pytest
# 9.2 and pytest-xdist 3.8 the groups are ignored (xdist renames ``item._nodeid``, which
# pytest 9.2 no longer reads), so today these tests also run beside each other; they
# are written to pass under that load.
_PROCESS_TESTS = (
    "/rpc/",
    "/distributed/",
    "/examples/",
    "/security/",
    "test_multihost",
    "/multihost/",
    "test_demo",
    "test_readme",
    "test_doctests",
    "/notebooks/",
    "/testing/",
    "/profiler/",
)


def pytest_collection_modifyitems(config, items):
    for item in items:
        path = str(item.path)
        if any(p in path for p in _PROCESS_TESTS):
            item.add_marker(pytest.mark.xdist_group("processes"))
