"""The ``common_distributed`` stand-ins that torch's process-group suite imports.

torch's ``distributed_test.py`` is a mixin (``DistributedTest._DistTestBase``) that torch
runs through its own ``TestDistBackend``: a ``MultiProcessTestCase`` whose ``_run`` starts
the process group on each rank, runs the test between two barriers and leaves with an exit
code (0, or one of ``TEST_SKIPS`` for a skip). Here the runner has made the processes, so
:class:`MultiProcessTestCase` runs the test in place, and the decorators below skip as
torch's do on a machine without GPUs, with BACKEND and WORLD_SIZE from the environment.
``_conformance_fixture`` re-exports these names.
"""

from __future__ import annotations

import itertools
import os
import random
import unittest
from collections.abc import Callable
from functools import reduce, wraps
from typing import Any, ClassVar, NamedTuple

import numpy as np

import tensorplay_jax as tp
import tensorplay_jax.distributed as dist


class TestSkip(NamedTuple):
    exit_code: int
    message: str


# The exit codes torch's runner reads as a skip (common_distributed.TEST_SKIPS).
TEST_SKIPS = {
    "backend_unavailable": TestSkip(72, "Skipped because distributed backend is not available."),
    "small_worldsize": TestSkip(73, "Skipped due to small world size."),
    "odd_worldsize": TestSkip(87, "Skipped due to odd world size."),
    "no_cuda": TestSkip(74, "CUDA is not available."),
    **{
        f"multi-gpu-{n}": TestSkip(code, f"Need at least {n} CUDA devices")
        for n, code in zip(range(1, 9), (75, 77, 80, 81, 82, 83, 84, 85), strict=True)
    },
    "nccl": TestSkip(76, "c10d not compiled with NCCL support"),
    "skipIfRocm": TestSkip(78, "Test skipped for ROCm"),
    "no_peer_access": TestSkip(79, "Test skipped because no GPU peer access"),
    "generic": TestSkip(86, "Test skipped at subprocess level"),
    "importerror": TestSkip(88, "Test skipped due to missing import"),
    "no_accelerator": TestSkip(89, "accelerator is not available."),
}


def skip_reason(exit_code: int) -> str | None:
    """The skip an exit code stands for, or None when it is not one."""
    return next((s.message for s in TEST_SKIPS.values() if s.exit_code == exit_code), None)


class DistTestCases:
    """Which backends implement what (the suite's skip conditions read these sets)."""

    skip_collective: ClassVar[dict[str, set[str]]] = {
        "allgather_coalesced": {"nccl", "mpi", "ucc", "xccl"},
        "reduce": set(),
        "sendrecv anysource": {"nccl", "ucc", "xccl"},
        "cpu barrier": {"nccl", "ucc", "xccl"},
    }
    backend_feature: ClassVar[dict[str, set[str]]] = {
        "gpu": {"nccl", "gloo", "ucc"},
        "cuda": {"nccl", "gloo", "ucc"},
        "ddp": {"nccl", "gloo", "ucc"},
        "subgroup": {"nccl", "gloo", "ucc"},
        "plugin": set(),
    }


def _skipping(message: str, when: Callable[[], bool]) -> Callable[[Callable[..., Any]], Any]:
    def decorator(func: Callable[..., Any]) -> Callable[..., Any]:
        @wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if when():
                raise unittest.SkipTest(message)
            return func(*args, **kwargs)

        return wrapper

    return decorator


def _world() -> int:
    return int(os.environ["WORLD_SIZE"])


def _backend() -> str:
    return os.environ["BACKEND"]


skip_if_no_gpu = _skipping(TEST_SKIPS["no_cuda"].message, lambda: True)
skip_if_small_worldsize = _skipping(
    TEST_SKIPS["small_worldsize"].message, lambda: _backend() != "mpi" and _world() < 8
)
skip_if_odd_worldsize = _skipping(
    TEST_SKIPS["odd_worldsize"].message, lambda: _backend() != "mpi" and _world() % 2 == 1
)


def nccl_skip_if_lt_x_gpu(backend: str, x: int) -> Callable[[Callable[..., Any]], Any]:
    return _skipping(TEST_SKIPS[f"multi-gpu-{x}"].message, lambda: backend == "nccl")


def require_n_gpus_for_nccl_backend(n: int, backend: str) -> Callable[[Callable[..., Any]], Any]:
    return _skipping(TEST_SKIPS[f"multi-gpu-{n}"].message, lambda: backend == "nccl")


def requires_nccl_version(version: Any, msg: str) -> Callable[[Callable[..., Any]], Any]:
    return lambda func: func  # torch: no check without CUDA


def with_nccl_blocking_wait(func: Callable[..., Any]) -> Callable[..., Any]:
    return func  # an NCCL setting; nothing to set for gloo


def with_dist_debug_levels(levels: list[str]) -> Callable[[Callable[..., Any]], Any]:
    """Run the test once per ``TORCH_DISTRIBUTED_DEBUG`` level, a barrier after each."""

    def decorator(func: Callable[..., Any]) -> Callable[..., Any]:
        @wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            old = os.environ.get("TORCH_DISTRIBUTED_DEBUG")
            ret = None
            try:
                for level in levels:
                    os.environ["TORCH_DISTRIBUTED_DEBUG"] = level
                    dist.set_debug_level_from_env()
                    ret = func(*args, **kwargs)
                    dist.barrier()
            finally:
                if old is None:
                    os.environ.pop("TORCH_DISTRIBUTED_DEBUG", None)
                else:
                    os.environ["TORCH_DISTRIBUTED_DEBUG"] = old
            return ret

        return wrapper

    return decorator


def verify_ddp_error_logged(model: Any, err_substr: str) -> None:
    """The error a DDP model recorded in its logging data contains ``err_substr``."""
    data = model._get_ddp_logging_data()
    for key in ("iteration", "has_error", "error"):
        if key not in data:
            raise AssertionError(f"Expected {key!r} in ddp_logging_data")
    expected = err_substr.split("\nException raised from ")[0]
    if expected not in data["error"]:
        raise AssertionError(f"Did not find {expected} in ddp logging data error: {data['error']}")


def simple_sparse_reduce_tests(rank: int, world_size: int, num_inputs: int = 1) -> list:
    """Sparse tensors of varying sparse and dense dimensions, each with the sum over ranks
    (the suite's sparse all-reduce cases)."""

    def generate(rank: int, world: int, sparse_dims: int = 1, dense_dims: int = 0) -> Any:
        indices = tp.reshape(tp.arange(rank + 1), (1, rank + 1))
        shape = [world] + [2] * dense_dims
        for _ in range(sparse_dims - 1):
            indices = tp.cat((indices, tp.zeros(1, rank + 1)))
            shape.append(world)
        values = tp.ones([rank + 1] + [2] * dense_dims)
        return tp.sparse_coo_tensor(indices, values, shape)

    kinds = [
        {"sparse_dims": 1},
        {"sparse_dims": 2},
        {"sparse_dims": 3},
        {"dense_dims": 1},
        {"dense_dims": 2},
        {"dense_dims": 3},
    ]
    total = num_inputs * world_size
    cases = []
    for kw in kinds:
        inputs = [generate(num_inputs * rank + i, total, **kw) for i in range(num_inputs)]
        expected = reduce(lambda a, b: a + b, [generate(r, total, **kw) for r in range(total)])
        cases.append((inputs, [expected] * num_inputs))
    return cases


def init_multigpu_helper(world_size: int, backend: str) -> dict[int, list[int]]:
    return {rank: [] for rank in range(world_size)}  # no GPUs


def initialize_temp_directories(init_method: str | None = None) -> None:
    """The runner made TEMP_DIR and its folders for the world (torch's parent does)."""


def cleanup_temp_dir() -> None:
    """The runner removes TEMP_DIR with the world's scratch folder."""


def skip_but_pass_in_sandcastle(reason: str) -> Any:
    return unittest.skip(reason)


def parametrize(names: str, values: list[Any], **_: Any) -> Callable[[Callable[..., Any]], Any]:
    """Record a test's parameters; :func:`instantiate_parametrized_tests` runs them."""

    def decorator(func: Callable[..., Any]) -> Callable[..., Any]:
        keys = [n.strip() for n in names.split(",")]
        rows = [v if len(keys) > 1 else (v,) for v in values]
        func.__dict__.setdefault("_tpj_parameters", []).insert(0, (keys, rows))
        return func

    return decorator


def instantiate_parametrized_tests(cls: type) -> type:
    """Each parametrized test runs every combination of its parameters in turn, under its
    own name (torch makes one test per combination; the runner gives one verdict)."""
    for name, func in list(vars(cls).items()):
        table = getattr(func, "_tpj_parameters", None)
        if not table:
            continue

        def every(self: Any, _func: Callable[..., Any] = func, _table: list = table) -> None:
            for combo in itertools.product(*(rows for _, rows in _table)):
                kwargs = {
                    k: v
                    for (keys, _), row in zip(_table, combo, strict=True)
                    for k, v in zip(keys, row, strict=True)
                }
                _func(self, **kwargs)

        setattr(cls, name, wraps(func)(every))
    return cls


def process_group_test_case(base: type) -> type:
    """torch's ``MultiProcessTestCase`` on ``base`` (the fixture's ``TestCase``): the runner
    made this rank's process, so a test runs in place and its error reaches the runner."""

    class MultiProcessTestCase(base):  # type: ignore[misc, valid-type]
        rank: int
        file_name: str

        @classmethod
        def setUpClass(cls) -> None:
            """torch's parent process prepares the world here; the runner has."""

        def run_test(self, test_name: str, parent_pipe: Any) -> None:
            # torch seeds every rank alike first (common_utils.set_rng_seed: SEED = 1234),
            # so tests that draw random tensors on each rank expect the same values
            tp.manual_seed(1234)
            random.seed(1234)
            np.random.seed(1234)
            getattr(self, test_name)()

        @property
        def destroy_pg_upon_exit(self) -> bool:
            return True

    return MultiProcessTestCase
