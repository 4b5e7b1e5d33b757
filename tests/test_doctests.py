"""Every docstring example in the package runs and prints what it claims.

The modules are found, not listed: :func:`pkgutil.walk_packages` walks
``tensorplay_jax`` and every module whose source holds a ``>>>`` example becomes
one test, so a new module is checked the day it lands. Per-module setup:

- Examples that start RPC or a process group (``init_rpc(`` / ``init_process_group(``
  in an example line) run in a fresh one-worker process from ``tests._procs``, with
  its own free ``MASTER_PORT``: they start and stop the job themselves, and a job
  must not outlive its test in this process.
- The collectives' examples run with empty globals: each is written to be copied
  as it stands, so it must import everything it uses.
- Everything else runs here, under ``tests/conftest.py``'s 8 virtual CPU devices.
"""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import pkgutil
import re
import sys

import pytest

import tensorplay_jax
import tensorplay_jax.collectives as C
from tests._procs import reported, run_workers
from tests._worker import report

OPTIONS = doctest.NORMALIZE_WHITESPACE

# Modules the walker does not import: ``__main__`` modules are scripts (importing one
# runs it), not modules with examples.
NOT_MODULES = re.compile(r"(^|\.)__main__$")

# Examples that cannot run in one process, with the reason. Empty today: every
# example that needs a job starts a one-worker job itself.
SKIP: dict[str, str] = {}

# Modules whose examples run with empty globals (see the module docstring).
CLEAN_GLOBALS = ("tensorplay_jax.collectives",)

_EXAMPLE_LINE = re.compile(r"^\s*>>>( |$)", re.MULTILINE)
_STARTS_A_JOB = re.compile(r"^\s*(>>>|\.\.\.) .*\b(init_rpc|init_process_group)\(", re.MULTILINE)


def _source(name: str) -> str:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return ""
    with open(spec.origin, encoding="utf-8") as f:
        return f.read()


# Packages walk_packages could not import (it skips their modules): a test fails on them.
_UNIMPORTABLE: list[str] = []


def _modules_with_examples() -> list[str]:
    walk = pkgutil.walk_packages(
        tensorplay_jax.__path__, tensorplay_jax.__name__ + ".", onerror=_UNIMPORTABLE.append
    )
    names = [tensorplay_jax.__name__]
    names += [info.name for info in walk if not NOT_MODULES.search(info.name)]
    return sorted(n for n in names if _EXAMPLE_LINE.search(_source(n)))


MODULES = _modules_with_examples()


def run_module_doctests(name: str) -> tuple[doctest.TestResults, int]:
    """Run ``name``'s examples (its own objects only, as ``doctest.testmod`` does).

    Returns the results and how many examples doctest found, ``+SKIP`` ones included.
    """
    module = importlib.import_module(name)
    clean = name.startswith(CLEAN_GLOBALS)
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=OPTIONS)
    found = 0
    for test in finder.find(module, name, globs={} if clean else None):
        found += len(test.examples)
        runner.run(test)
    return runner.summarize(verbose=False), found


def doctest_worker() -> None:
    """The worker-process side: run the examples of the module named in ``sys.argv[1]``."""
    result, found = run_module_doctests(sys.argv[1])
    report(found=found, failed=result.failed)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    if name in SKIP:
        pytest.skip(SKIP[name])
    if _STARTS_A_JOB.search(_source(name)):
        (res,) = run_workers(doctest_worker, 1, args=[name], timeout=180)
        got = reported(res)
        assert got["found"] > 0 and got["failed"] == 0, res  # res: doctest's report
        return
    result, found = run_module_doctests(name)
    # found: the examples in the source are all on this module's own objects (+SKIP ones too)
    assert found > 0 and result.failed == 0, (name, result, found)


def test_the_walker_finds_every_package():
    assert not _UNIMPORTABLE, f"packages that fail to import: {_UNIMPORTABLE}"
    found = {n.split(".")[1] for n in MODULES if n.count(".")}
    assert {"autograd", "collectives", "distributed", "nn", "rpc", "demo"} <= found, found


@pytest.mark.parametrize(
    "fn",
    [
        getattr(C, n)
        for n in C.__all__
        if callable(getattr(C, n)) and getattr(C, n) is not C.ReduceOp
    ],
    ids=lambda f: f.__name__,
)
def test_every_public_collective_has_an_example(fn):
    assert fn.__doc__ and ">>>" in fn.__doc__, f"{fn.__name__} has no runnable example"
