"""The conformance runner (``benchmarks/conformance.py``) on a suite written as torch's are.

torch is not installed in CI, so the suite here is our own, written the way torch's
``rpc_test.py`` is (torch imports, ``dist_init``, the agent fixture, a scaffolding enum):
the runner must rewrite its imports, run each test in a world of four processes, and
give the verdict that the test's behaviour calls for.
"""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path

import pytest

from tests._procs import REPO_ROOT

SUITE = textwrap.dedent(
    """
    import time

    import torch
    import torch.distributed.rpc as rpc
    from torch.distributed.rpc.internal import RPCExecMode
    from torch.testing._internal.dist_utils import dist_init, worker_name
    from torch.testing._internal.distributed.rpc.rpc_agent_test_fixture import (
        RpcAgentTestFixture,
    )


    @torch.jit.script
    def scripted(x):
        return x


    def add_one(t):
        return t + 1


    class ExampleTest(RpcAgentTestFixture):
        @dist_init
        def test_remote_add(self):
            dst = worker_name((self.rank + 1) % self.world_size)
            for mode in (RPCExecMode.SYNC, RPCExecMode.REMOTE):
                if mode == RPCExecMode.SYNC:
                    got = rpc.rpc_sync(dst, add_one, args=(torch.ones(2),))
                else:
                    got = rpc.remote(dst, add_one, args=(torch.ones(2),)).to_here()
                self.assertEqual(got, torch.ones(2) * 2)

        @dist_init
        def test_wrong_value(self):
            self.assertEqual(torch.ones(2), torch.zeros(2))

        def test_missing_api(self):
            with self.assertRaises(Exception):
                torch.no_such_function(1)

        def test_stalls(self):
            if self.rank == 2:
                time.sleep(600)
    """
)


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory):
    sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
    try:
        module = importlib.import_module("conformance")
    finally:
        sys.path.remove(str(REPO_ROOT / "benchmarks"))
    suite = tmp_path_factory.mktemp("suite") / "example_test.py"
    suite.write_text(SUITE)
    return module, suite


def _case(runner, name: str):
    module, suite = runner
    return module.Case("example", suite, "ExampleTest", name, None)


def test_a_passing_remote_test_passes_on_every_rank(runner) -> None:
    verdict = runner[0].run_case(_case(runner, "test_remote_add"), 60, None)
    assert verdict["status"] == "pass", verdict


def test_a_wrong_value_fails_with_the_assertion(runner) -> None:
    verdict = runner[0].run_case(_case(runner, "test_wrong_value"), 60, None)
    assert verdict["status"] == "fail"
    assert "values differ" in verdict["error"]


def test_a_missing_api_fails_naming_it_even_when_the_test_catches_it(runner) -> None:
    verdict = runner[0].run_case(_case(runner, "test_missing_api"), 60, None)
    assert verdict["status"] == "fail"
    assert "no_such_function" in verdict["error"]


def test_a_stalled_rank_fails_the_test_at_the_limit(runner) -> None:
    verdict = runner[0].run_case(_case(runner, "test_stalls"), 12, None)
    assert verdict["status"] == "fail"
    assert "stalled" in verdict["error"]
    assert verdict["seconds"] < 40


def test_scripted_helpers_and_cuda_tests_are_classified_not_applicable(
    tmp_path: Path, runner
) -> None:
    module = runner[0]
    source = SUITE + textwrap.dedent(
        """
        class ExampleTestMore(ExampleTest):
            def test_uses_script(self):
                scripted(torch.ones(1))

            def test_on_gpu(self):
                torch.ones(1).cuda()
        """
    )
    (tmp_path / "example_test.py").write_text(source)
    module.SUITES["example"] = ("example_test.py", ("ExampleTestMore",))
    try:
        cases = {c.name: c.not_applicable for c in module.collect("example", tmp_path)}
    finally:
        del module.SUITES["example"]
    assert cases["test_uses_script"] == "TorchScript"
    assert cases["test_on_gpu"] == "CUDA"
    assert cases["test_remote_add"] is None


def test_a_class_world_size_and_a_python_only_helper_call_are_read(tmp_path: Path, runner) -> None:
    module = runner[0]
    source = SUITE + textwrap.dedent(
        """
        class ModuleCreationMode:
            MODULE_CTOR = 1
            MODULE_CTOR_WITH_INTERFACE = 2


        class TwoWorkersTest(ExampleTest):
            @property
            def world_size(self):
                return 2

            @staticmethod
            def _create_remote_module_iter(dst, modes=None):
                if modes is None or ModuleCreationMode.MODULE_CTOR_WITH_INTERFACE in modes:
                    yield torch.jit.script(add_one)
                yield add_one

            def test_python_only(self):
                for f in self._create_remote_module_iter(
                    "w1", modes=[ModuleCreationMode.MODULE_CTOR]
                ):
                    f(torch.ones(1))

            def test_both_kinds(self):
                for f in self._create_remote_module_iter("w1"):
                    f(torch.ones(1))
        """
    )
    (tmp_path / "example_test.py").write_text(source)
    module.SUITES["example"] = ("example_test.py", ("TwoWorkersTest",))
    try:
        cases = {c.name: c for c in module.collect("example", tmp_path)}
    finally:
        del module.SUITES["example"]
    assert cases["test_python_only"].not_applicable is None
    assert cases["test_both_kinds"].not_applicable == "TorchScript"
    assert {c.world_size for c in cases.values()} == {2}
    verdict = module.run_case(cases["test_remote_add"], 60, None)
    assert verdict["status"] == "pass", verdict


def test_a_world_size_given_by_module_constants_is_read(tmp_path: Path, runner) -> None:
    # ddp_under_dist_autograd_test.py: ``return WORLD_SIZE`` with WORLD_SIZE = NUM_TRAINERS + 2
    module = runner[0]
    source = SUITE + textwrap.dedent(
        """
        NUM_TRAINERS = 2
        WORLD_SIZE = NUM_TRAINERS + 1


        class ThreeWorkersTest(ExampleTest):
            @property
            def world_size(self):
                return WORLD_SIZE


        class TwoWorkersTest(ExampleTest):
            @property
            def world_size(self):
                return NUM_TRAINERS * 1
        """
    )
    (tmp_path / "example_test.py").write_text(source)
    module.SUITES["example"] = ("example_test.py", ("ThreeWorkersTest", "TwoWorkersTest"))
    try:
        cases = module.collect("example", tmp_path)
    finally:
        del module.SUITES["example"]
    sizes = {(c.klass, c.name): c.world_size for c in cases}
    assert sizes[("ThreeWorkersTest", "test_remote_add")] == 3
    assert sizes[("TwoWorkersTest", "test_remote_add")] == 2
