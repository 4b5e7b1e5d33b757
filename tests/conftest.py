"""Test-wide setup: 8 virtual CPU devices, and the shared fixtures every package's tests use."""

import importlib.metadata
import os
import shutil
import tempfile

# Must happen before JAX is imported anywhere in the test process.
_flags = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in _flags:
    os.environ["XLA_FLAGS"] = (_flags + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

# XLA's CPU compiler in jaxlib 0.10 compiles with its loop emitter about a third faster
# than with its fusion emitters (runtime.xla_options gives our own programs the same
# option); the suite compiles thousands of test programs (the collectives' transforms
# above all), in this process and every one it starts. Later jaxlibs have no such
# option and would refuse the flag.
_jaxlib = tuple(int(p) for p in importlib.metadata.version("jaxlib").split(".")[:2])
if _jaxlib < (0, 11) and ("xla_cpu_use_fusion_emitters" not in os.environ["XLA_FLAGS"]):
    os.environ["XLA_FLAGS"] += " --xla_cpu_use_fusion_emitters=false"

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


# The files that take longest (minutes of a worker's time) run first, so that the
# xdist workers (``--dist loadfile``) end together instead of one finishing a long
# file alone; the rest keep their order.
LONGEST_FIRST = (
    "tests/collectives/test_higher_order.py",
    "tests/collectives/test_values_and_gradients.py",
    "tests/distributed/test_process_group.py",
    "tests/security/test_shutdown_bounds.py",
    "tests/test_readme.py",
    "tests/examples/test_tutorials.py",
    "tests/test_doctests.py",
    "tests/notebooks/test_notebooks.py",
    "tests/collectives/test_dtypes_and_ranks.py",
    "tests/testing/test_plugin.py",
    "tests/docs/test_docs.py",
    "tests/distributed/test_ddp.py",
    "tests/distributed/test_process_group_errors.py",
)


def pytest_collection_modifyitems(session, config, items):
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


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
