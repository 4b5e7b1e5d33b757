"""One rank of one conformance test: load torch's suite with its imports changed, run one test.

Run by ``benchmarks/conformance.py`` as ``python _conformance_world.py SUITE CLASS TEST OUT``
in each of a world's processes (``TPJ_CONFORMANCE_RANK``, ``MASTER_ADDR``/``MASTER_PORT``
and the init method in the environment). The suite's source is read from the installed
torch and its imports are rewritten in memory (the AST, not the text) by the map of
``_conformance_imports``: ``torch.X`` becomes ``tensorplay_jax.X``,
``torch.testing._internal.*`` becomes ``_conformance_fixture``, and a name that
tensorplay_jax lacks becomes a placeholder that fails only the tests that use it. The
rank writes its verdict (pass, fail with the error, or skip) as JSON to OUT.
"""

from __future__ import annotations

import ast
import json
import os
import sys
import time
import traceback
import types
import unittest
from pathlib import Path
from typing import Any

from _conformance_imports import (
    MissingAPI,
    RewriteImports,
    import_name,
    importing,
    missed,
    resolve,
)

SUITE_MODULE = "tpj_conformance_suite"
FIXTURE_MODULE = "tpj_conformance_suite_fixture"


def load_suite(path: Path, name: str = SUITE_MODULE) -> types.ModuleType:
    """Execute torch's suite file with its imports rewritten, as module ``name``."""
    tree = ast.fix_missing_locations(RewriteImports().visit(ast.parse(path.read_text())))
    module = types.ModuleType(name)
    module.__file__ = str(path)
    module.__dict__.update(__tpj_resolve__=resolve, __tpj_import_name__=import_name)
    sys.modules[name] = module
    importing.set()
    try:
        exec(compile(tree, str(path), "exec"), module.__dict__)
    finally:
        importing.clear()
    return module


def _run_driven(module: types.ModuleType, tests: type, test_name: str, rank: int) -> None:
    """Run a test as torch's runner does for a suite with a driver class: the driver's
    ``_run`` starts the process group, runs the test between barriers and exits; an exit
    code other than 0 is a skip (``TEST_SKIPS``) or a failure."""
    from _conformance_process_groups import skip_reason

    driver = getattr(module, os.environ["TPJ_CONFORMANCE_DRIVER"])
    case = type(f"{driver.__name__}WithSpawn", (driver, tests), {})
    try:
        case._run(rank, test_name, os.environ["TPJ_CONFORMANCE_FILE"], None)
    except SystemExit as e:
        code = e.code or 0
        if code == 0:
            return
        reason = skip_reason(code) if isinstance(code, int) else None
        if reason is None:
            raise RuntimeError(f"the rank exited with {code}") from e
        raise unittest.SkipTest(reason) from e


def run_one(suite: Path, class_name: str, test_name: str) -> dict[str, Any]:
    """Run ``class_name.test_name`` of ``suite`` in this process; the verdict as a dict."""
    from _conformance_fixture import TorchTestCase

    started = time.monotonic()
    rank = int(os.environ["TPJ_CONFORMANCE_RANK"])
    verdict: dict[str, Any] = {"rank": rank}
    try:
        module = load_suite(suite)
        tests = module
        for part in class_name.split("."):
            tests = getattr(tests, part)
        if "TPJ_CONFORMANCE_DRIVER" in os.environ:
            _run_driven(module, tests, test_name, rank)
        else:
            # A fixture torch mixes in (``FIXTURES``): loaded from torch as the suite is.
            mixins: tuple[type, ...] = ()
            if "TPJ_CONFORMANCE_FIXTURE" in os.environ:
                where, fixture = os.environ["TPJ_CONFORMANCE_FIXTURE"].rsplit(":", 1)
                mixins = (getattr(load_suite(Path(where), FIXTURE_MODULE), fixture),)
            case = type(class_name, (tests, *mixins, TorchTestCase), {})
            getattr(case(methodName=test_name), test_name)()
        if missed:
            raise MissingAPI(f"tensorplay_jax has no {missed[0]} (the test caught the error)")
        verdict["status"] = "pass"
    except unittest.SkipTest as e:
        verdict.update(status="skip", error=str(e))
    except BaseException as e:
        verdict.update(
            status="fail",
            error=f"{type(e).__name__}: {e}"[:2000],
            traceback=traceback.format_exc()[-6000:],
            missing=list(missed),
        )
    verdict["seconds"] = round(time.monotonic() - started, 2)
    verdict["finished"] = time.time()
    return verdict


def main() -> None:
    suite, class_name, test_name, out = sys.argv[1:5]
    verdict = run_one(Path(suite), class_name, test_name)
    Path(out).write_text(json.dumps(verdict))
    sys.stdout.flush()
    sys.stderr.flush()
    # A test that fails may leave RPC threads running: the verdict is written, leave now.
    os._exit(0)


if __name__ == "__main__":
    main()
