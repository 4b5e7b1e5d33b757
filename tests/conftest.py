"""Test-wide setup: 8 virtual CPU devices, and the shared fixtures every package's tests use."""

import os
import shutil
import tempfile

# Must happen before JAX is imported anywhere in the test process.
_flags = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in _flags:
    os.environ["XLA_FLAGS"] = (_flags + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

# One JAX compilation cache for the whole run, shared by the xdist workers and every
# process the tests start (they inherit this environment): the same eager operations,
# worker start-ups and example programs compile in many processes, and a cache hit
# skips XLA's compiler. Every program is cached (no minimum compile time or size).
# The process that creates the directory (pytest's main process) removes it at the end.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="tpj-test-jax-cache-")
    os.environ["TPJ_TEST_JAX_CACHE_OWNER"] = str(os.getpid())
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
    # A test process that drops the variable above gets the per-user cache
    # (runtime.compile_cache): kept inside the run's folder, not the user's.
    os.environ.setdefault(
        "TENSORPLAY_JAX_CACHE_DIR", os.path.join(os.environ["JAX_COMPILATION_CACHE_DIR"], "user")
    )

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


def pytest_unconfigure(config):
    if os.environ.get("TPJ_TEST_JAX_CACHE_OWNER") == str(os.getpid()):
        shutil.rmtree(os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)


@pytest.fixture
def port() -> int:
    """A free TCP port on loopback."""
    return free_port()


@pytest.fixture
def workers():
    """``workers(script, nprocs, ...)``: run ``script`` in N OS processes (``tests._procs``)."""
    return run_workers
