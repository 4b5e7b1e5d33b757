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
    import os
    import sys
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

        def test_exits(self):
            if self.rank == 1:
                print("rank 1 gives up here", file=sys.stderr, flush=True)
                os._exit(3)
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


def test_a_rank_that_exits_without_a_verdict_fails_the_test_with_its_last_words(runner) -> None:
    verdict = runner[0].run_case(_case(runner, "test_exits"), 60, None)
    assert verdict["status"] == "fail"
    assert verdict["error"] == "rank 1: exited with 3, no verdict"
    assert "rank 1 gives up here" in verdict["traceback"]


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


# A suite written as torch's process-group suite (distributed_test.py) is: a mixin class
# nested in another, run by a driver class of the suite's own whose ``_run`` starts the
# process group, runs the test between file barriers and leaves with an exit code.
DRIVEN_SUITE = textwrap.dedent(
    """
    import os
    import sys
    import time

    import torch
    import torch.distributed as dist
    from torch.testing._internal.common_distributed import (
        TEST_SKIPS,
        MultiProcessTestCase,
        skip_if_lt_x_gpu,
        skip_if_odd_worldsize,
    )

    BACKEND = os.environ["BACKEND"]


    class Barrier:
        count = 0

        @classmethod
        def sync(cls):
            cls.count += 1
            folder = os.path.join(os.environ["TEMP_DIR"], "barrier")
            with open(os.path.join(folder, str(os.getpid())), "w") as f:
                f.write(str(cls.count))
            deadline = time.time() + 30
            while time.time() < deadline:
                marks = [open(os.path.join(folder, n)).read() for n in os.listdir(folder)]
                if sum(int(m or 0) >= cls.count for m in marks) == int(os.environ["WORLD_SIZE"]):
                    return
                time.sleep(0.05)
            raise RuntimeError("barrier timeout")


    class TestDistBackend(MultiProcessTestCase):
        @classmethod
        def _run(cls, rank, test_name, file_name, pipe):
            self = cls(test_name)
            self.rank = rank
            dist.init_process_group(
                init_method=f"file://{file_name}",
                backend=BACKEND,
                world_size=int(os.environ["WORLD_SIZE"]),
                rank=rank,
            )
            Barrier.sync()
            self.run_test(test_name, pipe)
            Barrier.sync()
            dist.destroy_process_group()
            sys.exit(0)


    class DistributedTest:
        class _DistTestBase:
            def test_all_reduce(self):
                t = torch.ones(3) * (self.rank + 1)
                dist.all_reduce(t)
                self.assertEqual(t, torch.ones(3) * 6)

            def test_wrong_sum(self):
                t = torch.ones(3)
                dist.all_reduce(t)
                self.assertEqual(t, torch.ones(3))

            @skip_if_odd_worldsize
            def test_even_worlds_only(self):
                pass

            def test_exits_as_skipped(self):
                sys.exit(TEST_SKIPS["no_cuda"].exit_code)

            @skip_if_lt_x_gpu(2)
            def test_on_gpu(self):
                self._helper(cuda=True)

            def test_on_cpu_through_a_helper_that_can_use_gpus(self):
                self._helper(cuda=False)

            def _helper(self, cuda):
                t = torch.ones(1)
                if cuda:
                    t = t.cuda(self.rank)
                dist.all_reduce(t)
    """
)


@pytest.fixture
def driven(tmp_path: Path, runner):
    module = runner[0]
    (tmp_path / "driven_test.py").write_text(DRIVEN_SUITE)
    module.SUITES["driven"] = ("driven_test.py", ("DistributedTest._DistTestBase",))
    module.DRIVERS["driven"] = ("TestDistBackend", 3, {"BACKEND": "gloo"})
    try:
        yield module, {c.name: c for c in module.collect("driven", tmp_path)}
    finally:
        del module.SUITES["driven"], module.DRIVERS["driven"]


def test_a_driven_suite_runs_its_tests_through_its_driver_in_a_world_of_its_size(driven) -> None:
    module, cases = driven
    assert {c.world_size for c in cases.values()} == {3}
    verdict = module.run_case(cases["test_all_reduce"], 60, None)
    assert verdict["status"] == "pass", verdict


def test_a_wrong_value_in_a_driven_suite_fails_with_the_assertion(driven) -> None:
    module, cases = driven
    verdict = module.run_case(cases["test_wrong_sum"], 60, None)
    assert verdict["status"] == "fail"
    assert "values differ" in verdict["error"]


def test_a_driven_suite_skips_by_its_decorators_and_by_torch_s_exit_codes(driven) -> None:
    module, cases = driven
    odd = module.run_case(cases["test_even_worlds_only"], 60, None)
    assert odd["status"] == "skip" and "odd world size" in odd["error"], odd
    exited = module.run_case(cases["test_exits_as_skipped"], 60, None)
    assert exited["status"] == "skip" and "CUDA is not available" in exited["error"], exited


def test_a_driven_suite_runs_at_another_world_size_when_asked(driven) -> None:
    module, cases = driven
    (even,) = module.at_world_size([cases["test_even_worlds_only"]], 4)
    assert even.world_size == 4
    verdict = module.run_case(even, 60, None)  # its decorator skips it at 3 ranks
    assert verdict["status"] == "pass", verdict


def test_a_driven_suite_s_gpu_tests_are_read_from_the_test_s_own_code(driven) -> None:
    _, cases = driven
    assert cases["test_on_gpu"].not_applicable == "CUDA"
    assert cases["test_on_cpu_through_a_helper_that_can_use_gpus"].not_applicable is None
