"""The stand-ins for ``torch.testing._internal`` that torch's distributed suites import.

torch's suites (``rpc_test.py``, ``dist_autograd_test.py``) are mixins: torch runs
them through ``MultiProcessTestCase`` with a ``TensorPipeRpcAgentTestFixture``.
This module supplies what those suites take from ``torch.testing._internal``
(``dist_utils``, ``common_utils``, ``common_distributed`` and the agent fixture),
written here against tensorplay_jax's public API: ``dist_init`` starts RPC on
each rank and shuts it down, ``RpcAgentTestFixture`` gives the rank, the world
size and the init method the runner chose, and ``TorchTestCase`` compares
tensors with torch's default tolerances. A name the suites import that is not
here resolves to a placeholder that fails the test that uses it (see
``_conformance_world``). The process-group suite's ``common_distributed`` helpers
are in ``_conformance_process_groups`` and re-exported here.
"""

from __future__ import annotations

import contextlib
import enum
import io
import os
import re
import sys
import tempfile
import time
import unittest
from collections.abc import Callable, Iterator
from functools import partial, wraps
from typing import Any

import numpy as np
from _conformance_process_groups import (  # noqa: F401 (the process-group suite imports these)
    TEST_SKIPS,
    DistTestCases,
    cleanup_temp_dir,
    init_multigpu_helper,
    initialize_temp_directories,
    instantiate_parametrized_tests,
    nccl_skip_if_lt_x_gpu,
    parametrize,
    process_group_test_case,
    require_n_gpus_for_nccl_backend,
    requires_nccl_version,
    simple_sparse_reduce_tests,
    skip_but_pass_in_sandcastle,
    skip_if_no_gpu,
    skip_if_odd_worldsize,
    skip_if_small_worldsize,
    verify_ddp_error_logged,
    with_dist_debug_levels,
    with_nccl_blocking_wait,
)

import tensorplay_jax as tp
import tensorplay_jax.distributed as dist
import tensorplay_jax.distributed.rpc as rpc

FILE_SCHEMA = "file://"
INIT_METHOD_TEMPLATE = FILE_SCHEMA + "{file_name}"
IS_LINUX = sys.platform.startswith("linux")
IS_MACOS = sys.platform == "darwin"
IS_WINDOWS = sys.platform == "win32"
TEST_WITH_TSAN = False
TEST_WITH_ROCM = False
IS_FBCODE = False
IS_SANDCASTLE = False
# torch._utils_internal's test rendezvous address (the suites read it; the runner sets it)
TEST_MASTER_ADDR = "127.0.0.1"
TEST_MASTER_PORT = int(os.environ.get("MASTER_PORT", "29500"))

# torch's default comparison tolerances by dtype (``torch.testing.assert_close``).
_TOLERANCES = {
    np.dtype(np.float16): (1e-3, 1e-5),
    np.dtype(np.float32): (1.3e-6, 1e-5),
    np.dtype(np.float64): (1e-7, 1e-7),
    np.dtype(np.complex64): (1.3e-6, 1e-5),
    np.dtype(np.complex128): (1e-7, 1e-7),
}


class RPCExecMode(enum.Enum):
    """The four ways the suites call a function remotely (test scaffolding)."""

    SYNC = "sync"
    ASYNC = "async"
    ASYNC_JIT = "async_jit"
    REMOTE = "remote"


def _as_array(value: Any) -> np.ndarray | None:
    """``value`` as a NumPy array when it is a tensor, an array or a number; else None."""
    if isinstance(value, tp.Tensor):
        return np.asarray(value.detach().numpy() if hasattr(value, "numpy") else value)
    if isinstance(value, (np.ndarray, np.generic, bool, int, float, complex)):
        return np.asarray(value)
    if type(value).__module__.startswith(("jax", "jaxlib")):
        return np.asarray(value)
    return None


class TorchTestCase(unittest.TestCase):
    """``unittest.TestCase`` with torch's ``assertEqual``: tensors compare by value."""

    def assertEqual(
        self,
        first: Any,
        second: Any,
        msg: str | None = None,
        *,
        atol: float | None = None,
        rtol: float | None = None,
        **_: Any,
    ) -> None:
        sparse = [getattr(v, "is_sparse", False) is True for v in (first, second)]
        if any(sparse):  # torch compares layouts, then the (coalesced) contents
            if not all(sparse):
                raise self.failureException(msg or f"layouts differ:\n{first}\n!=\n{second}")
            first, second = first.to_dense(), second.to_dense()
        a, b = _as_array(first), _as_array(second)
        tensors = isinstance(first, tp.Tensor) or isinstance(second, tp.Tensor)
        if a is not None and b is not None and (tensors or a.ndim or b.ndim):
            if a.shape != b.shape and a.size != b.size:
                raise self.failureException(msg or f"shapes differ: {a.shape} != {b.shape}")
            a, b = a.reshape(-1), b.reshape(-1)
            default = _TOLERANCES.get(np.result_type(a, b), (0.0, 0.0))
            r = default[0] if rtol is None else rtol
            t = default[1] if atol is None else atol
            if not np.allclose(a, b, rtol=r, atol=t, equal_nan=True):
                raise self.failureException(msg or f"values differ:\n{first}\n!=\n{second}")
            return
        if isinstance(first, (list, tuple)) and isinstance(second, (list, tuple)):
            self.assertEqual(len(first), len(second), msg)
            for x, y in zip(first, second, strict=True):
                self.assertEqual(x, y, msg, atol=atol, rtol=rtol)
            return
        if isinstance(first, dict) and isinstance(second, dict):
            self.assertEqual(sorted(map(repr, first)), sorted(map(repr, second)), msg)
            for key in first:
                self.assertEqual(first[key], second[key], msg, atol=atol, rtol=rtol)
            return
        super().assertEqual(first, second, msg)

    def assertGreaterAlmostEqual(
        self,
        first: float,
        second: float,
        places: int | None = None,
        msg: str | None = None,
        delta: float | None = None,
    ) -> None:
        """``first >= second`` within ``delta`` (or ``places`` decimals), as torch's."""
        slack = delta if delta is not None else 10.0 ** -(7 if places is None else places)
        if first < second - slack:
            raise self.failureException(msg or f"{first} is not >= {second} within {slack}")

    def assertNotEqual(self, first: Any, second: Any, msg: str | None = None, **kw: Any) -> None:
        try:
            self.assertEqual(first, second, **kw)
        except self.failureException:
            return
        raise self.failureException(msg or f"{first!r} == {second!r}")


MultiProcessTestCase = process_group_test_case(TorchTestCase)


class RpcAgentTestFixture:
    """What torch's ``TensorPipeRpcAgentTestFixture`` gives a test: rank, world, init method."""

    @property
    def rank(self) -> int:
        return int(os.environ["TPJ_CONFORMANCE_RANK"])

    @property
    def world_size(self) -> int:
        return int(os.environ["TPJ_CONFORMANCE_WORLD_SIZE"])

    @property
    def file_name(self) -> str:
        return os.environ["TPJ_CONFORMANCE_FILE"]

    @property
    def file_init_method(self) -> str:
        return INIT_METHOD_TEMPLATE.format(file_name=self.file_name)

    @property
    def init_method(self) -> str:
        return os.environ["TPJ_CONFORMANCE_INIT_METHOD"]

    @property
    def rpc_backend(self) -> Any:
        return rpc.BackendType.TENSORPIPE

    @property
    def rpc_backend_options(self) -> Any:
        return rpc.TensorPipeRpcBackendOptions(init_method=self.init_method)

    def setup_fault_injection(self, faulty_messages: Any, messages_to_delay: Any) -> None:
        """Only torch's faulty agent injects faults; its tests are not applicable here."""

    def get_shutdown_error_regex(self) -> str:
        return "(.*)"

    def get_timeout_error_regex(self) -> str:
        return "RPC ran for more than"


def dist_init(
    old_test_method: Callable[..., Any] | None = None,
    setup_rpc: bool = True,
    clean_shutdown: bool = True,
    faulty_messages: Any = None,
    messages_to_delay: Any = None,
) -> Any:
    """Start RPC as ``worker{rank}`` before the test and shut it down after, as torch's does."""
    if old_test_method is None:
        return partial(
            dist_init,
            setup_rpc=setup_rpc,
            clean_shutdown=clean_shutdown,
            faulty_messages=faulty_messages,
            messages_to_delay=messages_to_delay,
        )

    @wraps(old_test_method)
    def new_test_method(self: Any, *args: Any, **kwargs: Any) -> Any:
        self.worker_id = self.rank
        self.setup_fault_injection(faulty_messages, messages_to_delay)
        options = self.rpc_backend_options
        if setup_rpc:
            rpc.init_rpc(
                name=f"worker{self.rank:d}",
                backend=self.rpc_backend,
                rank=self.rank,
                world_size=self.world_size,
                rpc_backend_options=options,
            )
        result = old_test_method(self, *args, **kwargs)
        if setup_rpc:
            rpc.shutdown(graceful=clean_shutdown)
        return result

    return new_test_method


def noop() -> None:
    pass


def worker_name(rank: int) -> str:
    return f"worker{rank}"


def wait_until_node_failure(rank: int, expected_error_regex: str = ".*") -> str:
    """Call ``noop`` on ``rank`` until a call fails with a matching error (60 s at most)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            rpc.rpc_sync(worker_name(rank), noop, args=())
            time.sleep(0.1)
        except Exception as e:
            if re.search(expected_error_regex, str(e)):
                return str(e)
    raise TimeoutError(f"worker{rank} did not fail within 60 s")


def _debug_counts() -> dict[str, Any]:
    return rpc._rref_context_get_debug_info()


def wait_until_pending_futures_and_users_flushed(timeout: int = 20) -> None:
    """Wait until this worker has no pending RRef forks or users."""
    deadline = time.monotonic() + timeout
    while True:
        info = _debug_counts()
        futures, users = int(info["num_pending_futures"]), int(info["num_pending_users"])
        if futures == 0 and users == 0:
            return
        if time.monotonic() > deadline:
            raise ValueError(
                f"{futures} pending futures and {users} pending users after {timeout} s"
            )
        time.sleep(0.1)


def get_num_owners_and_forks() -> tuple[str, str]:
    info = _debug_counts()
    return info["num_owner_rrefs"], info["num_forks"]


def wait_until_owners_and_forks_on_rank(
    num_owners: int, num_forks: int, rank: int, timeout: int = 20
) -> None:
    """Wait until ``rank`` holds ``num_owners`` owner RRefs and ``num_forks`` forks."""
    deadline = time.monotonic() + timeout
    while True:
        owners, forks = rpc.rpc_sync(
            worker_name(rank), get_num_owners_and_forks, args=(), timeout=5
        )
        if int(owners) == num_owners and int(forks) == num_forks:
            return
        if time.monotonic() > deadline:
            raise ValueError(
                f"worker{rank} had {owners} owners and {forks} forks after {timeout} s, "
                f"not {num_owners} and {num_forks}"
            )
        time.sleep(1)


def initialize_pg(init_method: str, rank: int, world_size: int) -> None:
    """A gloo process group on the job's init method, for tests that use ``dist.barrier``."""
    if not dist.is_initialized():
        dist.init_process_group(
            backend="gloo", init_method=init_method, rank=rank, world_size=world_size
        )


def get_function_event(function_events: Any, partial_event_name: str) -> Any:
    return next(e for e in function_events if partial_event_name in e.name)


def skip_if_lt_x_gpu(x: int) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    return unittest.skip(f"needs {x} GPUs")


def skip_but_pass_in_sandcastle_if(condition: bool, reason: str) -> Any:
    return unittest.skipIf(condition, reason)


def requires_gloo() -> Any:
    return skip_but_pass_in_sandcastle_if(
        not dist.is_gloo_available(), "c10d was not compiled with the Gloo backend"
    )


def requires_nccl() -> Any:
    return skip_but_pass_in_sandcastle_if(
        not dist.is_nccl_available(), "c10d was not compiled with the NCCL backend"
    )


def skip_if_rocm_multiprocess(func: Callable[..., Any]) -> Callable[..., Any]:
    return func  # no ROCm here (TEST_WITH_ROCM)


def tp_transports() -> None:
    return None


def load_tests(loader: Any, tests: Any, pattern: Any) -> Any:
    return tests


def get_cycles_per_ms() -> float:
    """How many ``time.sleep``-free spin cycles make a millisecond (torch's CUDA helper)."""
    return 1e6


@contextlib.contextmanager
def TemporaryFileName(*args: Any, **kwargs: Any) -> Iterator[str]:
    with tempfile.NamedTemporaryFile(*args, delete=False, **kwargs) as f:
        name = f.name
    try:
        yield name
    finally:
        with contextlib.suppress(OSError):
            os.unlink(name)


@contextlib.contextmanager
def captured_output() -> Iterator[tuple[io.StringIO, io.StringIO]]:
    new_out, new_err = io.StringIO(), io.StringIO()
    old_out, old_err = sys.stdout, sys.stderr
    try:
        sys.stdout, sys.stderr = new_out, new_err
        yield sys.stdout, sys.stderr
    finally:
        sys.stdout, sys.stderr = old_out, old_err
