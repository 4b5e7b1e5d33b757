"""The pytest plugin of ``tensorplay_jax.testing``: fixtures that start real RPC workers.

Installed as the ``pytest11`` entry point ``tensorplay_jax``, so every pytest run
in an environment with the package loads it. That is why it lives here, beside
the package and not inside it: importing ``tensorplay_jax.testing.plugin`` would
first import ``tensorplay_jax`` itself, hence JAX, in every pytest run, before
any ``conftest.py`` could set ``JAX_PLATFORMS`` or ``XLA_FLAGS``. This module
imports only pytest and the standard library; a fixture imports the package
when a test asks for it. Nothing changes for a test that uses none of them.

Fixtures (the test process joins the job as rank 0, ``"worker0"`` by default;
every other worker is a new process running only its RPC agent):

* ``dist_workers``: a fresh job for one test;
* ``dist_workers_module``: one job shared by every test of a module (faster).

Both yield a :class:`tensorplay_jax.testing.Workers`: ``.run(name, fn, *args)``,
``.run_all(fn)``, ``.names``, ``.kill(name)``. Size them with a marker,
``@pytest.mark.workers(3, names=[...], timeout=30)`` on the test (or in the
module's ``pytestmark`` for the module fixture), or for a whole project with
the ini options ``tpj_workers`` (default 2) and ``tpj_timeout`` (seconds every
wait may take, default 60). Disable the plugin with ``-p no:tensorplay_jax``.

Example::

    import pytest

    @pytest.mark.workers(3)
    def test_square_on_worker2(dist_workers):
        assert dist_workers.run("worker2", pow, 3, 2) == 9
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

__all__ = ["dist_workers", "dist_workers_module"]

DEFAULT_WORKERS = "2"
DEFAULT_TIMEOUT_S = "60"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "tpj_workers",
        "tensorplay_jax: workers (test process included) per job",
        default=DEFAULT_WORKERS,
    )
    parser.addini(
        "tpj_timeout",
        "tensorplay_jax: seconds any one wait on the workers may take",
        default=DEFAULT_TIMEOUT_S,
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "workers(n, *, names=None, timeout=None): the size (test process included), worker "
        "names and wait bound of the dist_workers / dist_workers_module job (tensorplay_jax)",
    )


def _start(request: pytest.FixtureRequest) -> Iterator[Any]:
    from tensorplay_jax.testing import Workers

    marker = request.node.get_closest_marker("workers")
    args, kwargs = (marker.args, dict(marker.kwargs)) if marker else ((), {})
    n = int(args[0]) if args else int(request.config.getini("tpj_workers"))
    timeout = float(kwargs.pop("timeout", None) or request.config.getini("tpj_timeout"))
    workers = Workers(n, timeout=timeout, **kwargs)
    try:
        workers.start()
        yield workers
    finally:
        workers.close()


@pytest.fixture
def dist_workers(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A job of N real RPC workers for one test; this process is rank 0 (``Workers``)."""
    yield from _start(request)


@pytest.fixture(scope="module")
def dist_workers_module(request: pytest.FixtureRequest) -> Iterator[Any]:
    """As ``dist_workers``, one job shared by the module (size it in ``pytestmark``)."""
    yield from _start(request)
