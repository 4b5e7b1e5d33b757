"""Run torch's own distributed test suites against tensorplay_jax, imports changed; one verdict
per test.

torch ships its distributed suites in the wheel, under
``torch/testing/_internal/distributed/``: ``rpc/rpc_test.py``,
``rpc/dist_autograd_test.py``, ``rpc/dist_optimizer_test.py``,
``nn/api/remote_module_test.py``, ``ddp_under_dist_autograd_test.py``, the two
example programs under ``rpc/examples/`` and the process-group suite
``distributed_test.py`` (``SUITES``; the last runs through its own driver class,
``DRIVERS``, with three ranks and ``BACKEND=gloo`` as torch's CI runs it on CPU).
This runner reads them from an installed torch at run time (torch is a benchmark-only
extra: ``pip install torch==2.13.0``, or ``PYTHONPATH`` pointing at one), classifies each
test (applicable, or not applicable with the reason), and runs every applicable test in
a fresh world of four processes (or the size its class sets), as torch does, with
torch's default ``file://`` init method (``--init tcp`` for ``tcp://``) and a 60 s
limit per test. Each rank loads the suite with its imports rewritten
(``_conformance_world``) and the ``torch.testing._internal`` helpers supplied by
``_conformance_fixture``; nothing of torch's test code is stored here.

Usage::

    PYTHONPATH=/tmp/torchlib python benchmarks/conformance.py              # every suite
    python benchmarks/conformance.py --suite dist_autograd -k backward     # a subset
    python benchmarks/conformance.py --list                                # classify only
    python benchmarks/conformance.py --json out.json --markdown            # the docs table
    python benchmarks/conformance.py --suite c10d --world-size 4           # other world sizes

A test passes when every rank passes; it fails with the first error in time (a rank
that fails first names the cause; the others often fail because it left).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import datetime
import importlib.util
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WORLD = HERE / "_conformance_world.py"
WORLD_SIZE = 4
INIT = "file"  # the suites' default init method (torch's fixture: file://, or tcp:// by choice)

# The suites (their files under torch's testing/_internal/distributed) and the classes
# of theirs that torch runs on its CPU TensorPipe agent.
SUITES = {
    "rpc": ("rpc/rpc_test.py", ("RpcTest", "TensorPipeAgentRpcTest")),
    "dist_autograd": (
        "rpc/dist_autograd_test.py",
        ("DistAutogradTest", "TensorPipeAgentDistAutogradTest", "FaultyAgentDistAutogradTest"),
    ),
    "faulty_agent": ("rpc/faulty_agent_rpc_test.py", ("FaultyAgentRpcTest",)),
    "dist_optimizer": ("rpc/dist_optimizer_test.py", ("DistOptimizerTest",)),
    "remote_module": (
        "nn/api/remote_module_test.py",
        ("RemoteModuleTest", "ThreeWorkersRemoteModuleTest"),
    ),
    "ddp_under_dist_autograd": (
        "ddp_under_dist_autograd_test.py",
        ("DdpUnderDistAutogradTest", "DdpComparisonTest"),
    ),
    "parameter_server_example": ("rpc/examples/parameter_server_test.py", ("ParameterServerTest",)),
    "rl_example": (
        "rpc/examples/reinforcement_learning_rpc_test.py",
        ("ReinforcementLearningRpcTest",),
    ),
    # The process-group suite (collectives, groups, DDP), as torch runs it on CPU:
    # test/distributed/test_distributed_spawn.py with BACKEND=gloo.
    "c10d": ("distributed_test.py", ("DistributedTest._DistTestBase",)),
}
# Suites whose ranks torch runs through a class of the suite's own (its
# ``MultiProcessTestCase`` subclass, whose ``_run`` starts the process group, runs the test
# between two barriers and leaves), with the world size and environment of torch's CI:
# ``run_test.py`` runs the gloo suite with WORLD_SIZE=3 on a machine without GPUs.
DRIVERS = {"c10d": ("TestDistBackend", 3, {"BACKEND": "gloo"})}
# Classes that torch runs with a fixture of its own mixed in (its rpc_utils.generate_tests:
# the faulty agent's tests with FaultyRpcAgentTestFixture, which starts FAULTY_TENSORPIPE,
# tensorplay's fault-injecting backend). The fixture is read from torch and loaded as the
# suite is, its imports changed.
FIXTURES = {
    "FaultyAgentRpcTest": ("rpc/faulty_rpc_agent_test_fixture.py", "FaultyRpcAgentTestFixture"),
    "FaultyAgentDistAutogradTest": (
        "rpc/faulty_rpc_agent_test_fixture.py",
        "FaultyRpcAgentTestFixture",
    ),
}
# Classes whose every test is not applicable, with the reason.
OTHER_CLASSES = {
    "CudaRpcTest": "CUDA",
    "TensorPipeAgentCudaRpcTest": "CUDA",
    "CudaDistAutogradTest": "CUDA",
    "TensorPipeCudaDistAutogradTest": "CUDA",
    "CudaRemoteModuleTest": "CUDA",
    "CudaDdpComparisonTest": "CUDA",
}
# Tests that assert what we choose to do differently, each with the reason (docs/porting.md).
DIFFERENCES = {
    "DistAutogradTest.test_backward_unused_send_function": (
        "we differ: asserts that torch's backward hangs forever on an unused send function "
        "(its FAST mode); ours completes (no wait without an end)"
    ),
    "DistAutogradTest.test_no_grad_copy": (
        "we differ: asserts that a context copies a gradient whose buffer a custom Function "
        "also saw (data_ptr differs); JAX arrays are immutable, so a gradient keeps the "
        "buffer it was given (docs/porting.md)"
    ),
    "DistAutogradTest.test_no_grad_copy_sparse": (
        "we differ: asserts that a context copies a sparse gradient whose buffer a custom "
        "Function also saw (data_ptr differs); JAX arrays are immutable, so a gradient keeps "
        "the buffer it was given (docs/porting.md)"
    ),
    "DistributedTest._DistTestBase.test_gather_object": (
        "we differ: asserts that all_gather_object of an instance of a class defined inside "
        "a function raises pickle's AttributeError; the object collectives carry what "
        "cloudpickle carries, such classes and lambdas too (docs/porting.md)"
    ),
    "RpcTest.test_non_cont_tensors": (
        "we differ: asserts is_contiguous() is False for a transposed Tensor; JAX arrays have "
        "no strides, so every Tensor is contiguous here"
    ),
    "RpcTest.test_user_rref_backward": (
        "we differ: asserts that a user RRef's backward() without a context id raises; here it "
        "runs the local backward on the owner (docs/porting.md)"
    ),
    "RpcTest.test_wait_all_workers_timeout": (
        "we differ: replaces rpc.api._wait_all_workers with a slow all-gather and expects "
        "shutdown(timeout=0.01) to time out in it; our graceful shutdown waits on the "
        "rendezvous store instead (no limit while the others live), so the 10 ms bound "
        "races the other ranks' arrival and the test passes or fails by timing "
        "(docs/porting.md)"
    ),
    "ThreeWorkersRemoteModuleTest.test_send_remote_module_over_the_wire": (
        "we differ: asserts the exact __dict__ of a RemoteModule decoded on a third worker "
        "(torch's _REMOTE_MODULE_PICKLED_ATTRIBUTES, and `on` as a name string); our handle "
        "carries its dataclass fields and Module state, and `on` is a WorkerInfo "
        "(docs/porting.md)"
    ),
    "TensorPipeAgentRpcTest.test_dynamic_rpc_init_rpc": (
        "we differ: every rank starts a dynamic group and shuts down at once; here rank 0 hosts "
        "the group's store, so a rank that comes after rank 0 left is refused (tensorplay's "
        "file store outlives its creator)"
    ),
    "TensorPipeAgentRpcTest.test_dynamic_and_static_init_rpc_together": (
        "we differ: rank 0 of the fixed-size group leaves before rank 3 tries to join it "
        "dynamically; here a group's store lives with its rank 0, so rank 3 waits for a new "
        "rank 0 until init_timeout (tensorplay's file store still says 'fixed-size')"
    ),
    **{
        f"DistributedTest._DistTestBase.test_send_recv_any_source{form}": (
            "we differ: receives with src=None (from any sender); here a receive names its "
            "sender, as a send is one call both ranks of a pair run together (docs/porting.md)"
        )
        for form in ("", "_autograd_profiler", "_torch_profiler")
    },
    "TensorPipeAgentRpcTest.test_op_with_invalid_args": (
        "we differ: matches the C++ dispatcher's schema error; operators here are Python "
        "functions, and a call with missing arguments raises Python's TypeError"
    ),
}
# Tests whose code matches a not-applicable pattern but which are applicable, and why.
APPLICABLE = {
    "RemoteModuleTest.test_unsupported_methods": (
        "calls .cuda() only to assert that a RemoteModule refuses it"
    ),
    **{
        f"DistributedTest._DistTestBase.test_{test}_{kind}_profiler": (
            "checks the point-to-point events (gloo:send, gloo:recv: count, async, input "
            "shapes) of autograd.profiler.profile / profiler.profile, which ours record"
        )
        for test in ("send_recv", "send_recv_with_tag", "isend")
        for kind in ("autograd", "torch")
    },
    "FaultyAgentRpcTest.test_check_failed_messages": (
        "calls rpc.api._delete_all_user_and_unforked_owner_rrefs() only to release its "
        "RRefs, which tensorplay_jax's rpc.api does as tensorplay's"
    ),
}
# What in a test's own code (its body, decorators and the self._helpers it calls) makes it
# not applicable. Checked in this order; the first that matches gives the reason.
NOT_APPLICABLE = (
    ("CUDA", re.compile(r"cuda|skip_if_lt_x_gpu|_gpu\(")),
    ("TorchScript", re.compile(r"torch\.jit|ScriptModule|_script_|script_|\.jit\b")),
    (
        "torch profiler internals",
        re.compile(
            r"_profile\b|profiler|record_function|get_function_event|_build_rpc_profiling_key"
        ),
    ),
    (
        "private torch API (agent, pickler or C++ internals)",
        re.compile(
            r"_internal_rpc_pickler|_use_rpc_pickler|_thread_local_var|PythonUDF|StubRpcAgent"
            r"|_set_and_start_rpc_agent|_get_current_rpc_agent|torch\._C|_tensorpipe|_transports"
            r"|mock\.patch|_delete_all_user_and_unforked_owner_rrefs|_set_rpc_backend"
            r"|_cleanup_python_rpc_handler|_get_profiling_key|rpc\.api\._agent"
            r"|_rref_context_get_debug_info\(\)\[|_test_clean_context_backward|_retryable|_init_rpc_backend"
            r"|internal\.serialize|_get_default_store|_dump_DDP_relevant_env_vars"
            r"|_get_default_group|_get_pg_config|verify_ddp_error_logged|_get_ddp_logging_data"
            r"|_set_ddp_runtime_logging_sample_rate|_rank_not_in_group|\._serialize\(\)"
        ),
    ),
)


# A test that asks for double precision: a port turns on JAX's 64-bit mode, the documented
# switch (JAX_ENABLE_X64=1), for such a program; the other worlds run as JAX does by default.
_FLOAT64 = re.compile(r"float64|\.double\(|torch\.double\b|DoubleTensor")


@dataclasses.dataclass
class Case:
    """One test of one suite, with why it is not applicable (None when it is)."""

    suite: str
    path: Path
    klass: str
    name: str
    not_applicable: str | None
    x64: bool = False  # the test asks for float64: its world turns on JAX's 64-bit mode
    world_size: int = WORLD_SIZE  # the class's own ``world_size`` when it sets one
    fixture: str | None = None  # ``path:Class`` of the fixture torch mixes in (FIXTURES)

    @property
    def sparse(self) -> bool:
        return "sparse" in self.name

    @property
    def label(self) -> str:
        return f"{self.klass}.{self.name}"


def torch_suite_dir(explicit: str | None) -> Path:
    """Where torch's distributed suites are (``testing/_internal/distributed``), without
    importing torch."""
    if explicit:
        return Path(explicit)
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        sys.exit(
            "conformance: torch is not importable; install the benchmark extra "
            "(pip install torch==2.13.0), set PYTHONPATH to a torch install, or pass --torch-dir"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "testing/_internal/distributed"


@dataclasses.dataclass
class _Suite:
    """A suite file's lines, its TorchScript names and its module-level definitions."""

    lines: list[str]
    scripted: set[str]
    defs: dict[str, ast.AST]


def _self_calls(node: ast.AST) -> set[str]:
    """Names of the test class's members ``node`` reaches: ``self.<name>`` (called or
    passed on, as to an RPC) and ``SomeTest.<name>``."""
    return {
        n.attr
        for n in ast.walk(node)
        if isinstance(n, ast.Attribute)
        and isinstance(n.value, ast.Name)
        and (n.value.id == "self" or n.value.id.endswith(("Test", "TestCommon")))
    }


def _segment(lines: list[str], node: ast.AST) -> str:
    """The source lines of ``node`` (its decorators included)."""
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
    return "".join(lines[first - 1 : node.end_lineno])


def _scripted(tree: ast.Module, source: list[str]) -> set[str]:
    """Module-level functions and classes that are TorchScript (scripted or ScriptModules)."""
    out = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            text = _segment(source, node)
            head = text.split(":", 1)[0] if isinstance(node, ast.ClassDef) else ""
            decorated = any("jit" in ast.unparse(d) for d in node.decorator_list)
            function_uses_jit = isinstance(node, ast.FunctionDef) and "torch.jit" in text
            if decorated or "ScriptModule" in head or function_uses_jit:
                out.add(node.name)
    return out


def collect(suite: str, directory: Path) -> list[Case]:
    """Every test of ``suite``'s classes, each classified."""
    filename, classes = SUITES[suite]
    path = directory / filename
    text = path.read_text()
    tree = ast.parse(text)
    driven = DRIVERS.get(suite)
    source = text.splitlines(keepends=True)
    scripted = _scripted(tree, source)
    # Module-level helpers a test may name (the test classes themselves are not helpers).
    top = {
        n.name: n
        for n in tree.body
        if isinstance(n, ast.FunctionDef) or (isinstance(n, ast.ClassDef) and "Test" not in n.name)
    }
    info = _Suite(source, scripted, top)
    defs = _classes(tree.body)
    names = _constants(tree)

    def methods(klass: str) -> dict[str, ast.FunctionDef]:
        node = defs.get(klass)
        if node is None:
            return {}
        found: dict[str, ast.FunctionDef] = {}
        for base in reversed(node.bases):
            found.update(methods(ast.unparse(base)))
        found.update({f.name: f for f in node.body if isinstance(f, ast.FunctionDef)})
        return found

    cases = []
    for klass in (*classes, *(c for c in OTHER_CLASSES if c in defs)):
        table = methods(klass)
        for name, fn in table.items():
            if not name.startswith("test"):
                continue
            reach = _reach(fn, table, info)
            x64 = bool(_FLOAT64.search(reach.own) or _FLOAT64.search(reach.helpers))
            if driven:
                # This suite's helpers branch on a ``cuda`` argument that a CPU test
                # leaves False: only the test's own code (decorators included) says
                # whether it needs a GPU, the profiler or private API.
                # (``cuda=False`` and ``profiler_ctx=None`` say a call uses neither).
                own = re.sub(r"\b(cuda|profiler_ctx)=(False|None)\b", "", _segment(source, fn))
                reach = _Reach(own, "", reach.named)
            reason = (
                OTHER_CLASSES.get(klass)
                or DIFFERENCES.get(f"{klass}.{name}")
                or (
                    None
                    if f"{klass}.{name}" in APPLICABLE
                    else _reason(reach, info, driven is not None)
                )
            )
            size = driven[1] if driven else _world_size(klass, defs, names) or WORLD_SIZE
            fixture = FIXTURES.get(klass)
            mixed = None if fixture is None else f"{directory / fixture[0]}:{fixture[1]}"
            cases.append(Case(suite, path, klass, name, reason, x64, size, mixed))
    return cases


def _classes(body: list[ast.stmt], prefix: str = "") -> dict[str, ast.ClassDef]:
    """Every class of a suite by its qualified name (``DistributedTest._DistTestBase``)."""
    found = {}
    for node in body:
        if isinstance(node, ast.ClassDef):
            found[prefix + node.name] = node
            found.update(_classes(node.body, f"{prefix}{node.name}."))
    return found


def _constants(tree: ast.Module) -> dict[str, int]:
    """The suite's module-level integer constants (``NUM_TRAINERS = 4``,
    ``WORLD_SIZE = NUM_TRAINERS + 2``), in order."""
    found: dict[str, int] = {}
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            value = _integer(node.value, found)
            if value is not None:
                found[node.targets[0].id] = value
    return found


def _integer(node: ast.AST, names: dict[str, int]) -> int | None:
    """``node``'s value when it is an integer, a known constant, or a sum, difference or
    product of those; None otherwise."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub | ast.Mult):
        a, b = _integer(node.left, names), _integer(node.right, names)
        if a is None or b is None:
            return None
        return (
            a + b
            if isinstance(node.op, ast.Add)
            else a - b
            if isinstance(node.op, ast.Sub)
            else a * b
        )
    return None


def _world_size(klass: str, defs: dict[str, ast.ClassDef], names: dict[str, int]) -> int | None:
    """What a class (or its nearest base that does) returns from ``world_size``: an
    integer or one of the suite's constants."""
    node = defs.get(klass)
    if node is None:
        return None
    for f in node.body:
        if isinstance(f, ast.FunctionDef) and f.name == "world_size":
            ret = next((n for n in ast.walk(f) if isinstance(n, ast.Return)), None)
            if ret is not None and ret.value is not None:
                value = _integer(ret.value, names)
                if value is not None:
                    return value
    for base in node.bases:
        found = _world_size(ast.unparse(base), defs, names)
        if found:
            return found
    return None


@dataclasses.dataclass
class _Reach:
    """What a test runs: its own code and its ``self._helpers`` (``own``), and the
    module-level functions and classes those name (``helpers``)."""

    own: str
    helpers: str
    named: set[str]


# Helpers with a TorchScript branch that a call rules out by one keyword argument
# (remote_module_test.py: ``modes=[ModuleCreationMode.MODULE_CTOR]`` builds Python
# modules only). A test whose every call passes it does not reach that branch.
_BRANCH_GUARDS = {"_create_remote_module_iter": ("modes", "[ModuleCreationMode.MODULE_CTOR]")}


def _guarded(node: ast.AST, helper: str) -> bool:
    """Whether every call of ``self.<helper>`` in ``node`` passes its guard argument."""
    name, value = _BRANCH_GUARDS[helper]
    calls = [
        c
        for c in ast.walk(node)
        if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == helper
    ]
    return bool(calls) and all(
        any(k.arg == name and ast.unparse(k.value) == value for k in c.keywords) for c in calls
    )


def _reach(fn: ast.FunctionDef, table: dict[str, ast.FunctionDef], suite: _Suite) -> _Reach:
    seen, todo, text, named = set(), [fn], [], set()
    while todo:
        node = todo.pop()
        if node.name in seen:
            continue
        seen.add(node.name)
        text.append(_segment(suite.lines, node))
        todo.extend(
            table[m]
            for m in _self_calls(node)
            if m in table and m not in seen and not (m in _BRANCH_GUARDS and _guarded(node, m))
        )
        named |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    helpers = "\n".join(_segment(suite.lines, suite.defs[n]) for n in named & suite.defs.keys())
    return _Reach("\n".join(text), helpers, named)


# In a suite run by a driver, a test runs on GPUs when its decorators ask for them or its
# own code moves to one, not when its name says "cuda" (the rest skip at run time, by the
# suite's own decorators, and count as not applicable then).
_DRIVEN_CUDA = re.compile(r"skip_if_lt_x_gpu|skip_if_no_gpu|\.cuda\(|cuda\.set_device")


def _reason(reach: _Reach, suite: _Suite, driven: bool = False) -> str | None:
    """Why a test is not applicable, from its own code and helpers (the module-level
    ones it names count only for private APIs)."""
    if reach.named & suite.scripted:
        return "TorchScript"
    patterns = NOT_APPLICABLE
    if driven:
        patterns = (("CUDA", _DRIVEN_CUDA), *NOT_APPLICABLE[1:])
    found = next((why for why, pattern in patterns if pattern.search(reach.own)), None)
    if found is None:
        private = NOT_APPLICABLE[-1]
        found = private[0] if private[1].search(reach.helpers) else None
    return found


def _env(case: Case, rank: int, port: int, scratch: Path) -> dict[str, str]:
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONWARNINGS="ignore")
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        env.pop(name, None)
    # Workers import this checkout, never torch (its directory may be on PYTHONPATH).
    env["PYTHONPATH"] = str(ROOT)
    env.update(
        # The test's rank and world size, for the fixture only: as under torch's runner,
        # RANK and WORLD_SIZE are not in the environment (a suite checks what init_rpc
        # does without them).
        TPJ_CONFORMANCE_RANK=str(rank),
        TPJ_CONFORMANCE_WORLD_SIZE=str(case.world_size),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        TPJ_CONFORMANCE_INIT_METHOD=(
            f"tcp://127.0.0.1:{port}" if INIT == "tcp" else f"file://{scratch / 'init_file'}"
        ),
        TPJ_CONFORMANCE_FILE=str(scratch / "init_file"),
    )
    if case.suite in DRIVERS:
        # What torch's runner and the driver's setUp give every rank: the backend, the
        # world size, and the shared folders (initialize_temp_directories) the suite's
        # file barrier and its tests use.
        driver, _, extra = DRIVERS[case.suite]
        for sub in ("barrier", "test_dir", "init_dir"):
            (scratch / sub).mkdir(exist_ok=True)
        env.update(extra)
        env.update(
            TPJ_CONFORMANCE_DRIVER=driver,
            WORLD_SIZE=str(case.world_size),
            TEMP_DIR=str(scratch),
            INIT_METHOD=f"file://{scratch / 'init_dir' / 'shared_init_file'}",
        )
    if case.fixture is not None:
        env["TPJ_CONFORMANCE_FIXTURE"] = case.fixture
    if case.x64:
        env["JAX_ENABLE_X64"] = "1"
    return env


def _free_port() -> int:
    from tensorplay_jax.runtime.launch import free_port

    return free_port()


def run_case(case: Case, timeout: float, logs: Path | None) -> dict:
    """Run ``case`` in a fresh world of ``case.world_size`` processes; its verdict."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tpj-conf-") as tmp:
        scratch = Path(tmp)
        port = _free_port()
        procs = []
        for rank in range(case.world_size):
            out = scratch / f"rank{rank}.json"
            log = open(scratch / f"rank{rank}.log", "wb")  # noqa: SIM115 (closed below)
            argv = [sys.executable, str(WORLD), str(case.path), case.klass, case.name, str(out)]
            procs.append(
                (
                    subprocess.Popen(
                        argv,
                        env=_env(case, rank, port, scratch),
                        stdout=log,
                        stderr=log,
                        start_new_session=True,
                    ),
                    log,
                )
            )
        verdicts, stalled = _wait(procs, scratch, timeout)
        if logs is not None:
            logs.mkdir(parents=True, exist_ok=True)
            for rank in range(case.world_size):
                src = scratch / f"rank{rank}.log"
                (logs / f"{case.suite}.{case.label}.rank{rank}.log").write_bytes(src.read_bytes())
    seconds = round(time.monotonic() - started, 1)
    failed = sorted((v for v in verdicts if v["status"] == "fail"), key=lambda v: v["finished"])
    if stalled:
        return {
            "status": "fail",
            "error": f"stalled: no verdict within {timeout:.0f} s",
            "seconds": seconds,
        }
    if failed:
        first = failed[0]
        return {
            "status": "fail",
            "error": f"rank {first['rank']}: {first['error']}",
            "traceback": first.get("traceback", ""),
            "seconds": seconds,
        }
    if any(v["status"] == "skip" for v in verdicts):
        reason = next(v["error"] for v in verdicts if v["status"] == "skip")
        return {"status": "skip", "error": reason, "seconds": seconds}
    return {"status": "pass", "seconds": seconds}


def _wait(procs: list, scratch: Path, timeout: float) -> tuple[list[dict], bool]:
    """Wait for the world; after the first rank fails, the rest get 5 s. Kill what is left."""
    deadline = time.monotonic() + timeout
    verdicts: dict[int, dict] = {}
    stalled = False
    while len(verdicts) < len(procs):
        for rank, (proc, _) in enumerate(procs):
            if rank in verdicts or proc.poll() is None:
                continue
            out = scratch / f"rank{rank}.json"
            verdicts[rank] = (
                json.loads(out.read_text())
                if out.exists()
                else {
                    "rank": rank,
                    "status": "fail",
                    "error": f"exited with {proc.returncode}, no verdict",
                    "traceback": _tail(scratch / f"rank{rank}.log"),
                    "finished": time.time(),
                }
            )
            if verdicts[rank]["status"] == "fail":
                deadline = min(deadline, time.monotonic() + 5)
        if time.monotonic() > deadline:
            stalled = not any(v["status"] == "fail" for v in verdicts.values())
            break
        time.sleep(0.05)
    for proc, log in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        log.close()
    return list(verdicts.values()), stalled


def _tail(log: Path, chars: int = 2000) -> str:
    """The end of a rank's output: what a rank that exited without a verdict last said."""
    try:
        return log.read_bytes()[-chars:].decode(errors="replace")
    except OSError:
        return ""


def summarize(cases: Iterable[Case], results: dict[str, dict]) -> list[dict]:
    """Per suite: applicable, passed, failed (sparse apart), not applicable."""
    rows = []
    for suite in SUITES:
        mine = [c for c in cases if c.suite == suite]
        ran = [c for c in mine if c.not_applicable is None and f"{suite}.{c.label}" in results]
        status = {c.label: results[f"{suite}.{c.label}"]["status"] for c in ran}
        skipped = [c for c in ran if status[c.label] == "skip"]
        applicable = [c for c in ran if status[c.label] != "skip"]
        dense = [c for c in applicable if not c.sparse]
        rows.append(
            {
                "suite": suite,
                "applicable": len(applicable),
                "passed": sum(status[c.label] == "pass" for c in applicable),
                "sparse": sum(c.sparse for c in applicable),
                "sparse_passed": sum(c.sparse and status[c.label] == "pass" for c in applicable),
                "dense": len(dense),
                "dense_passed": sum(status[c.label] == "pass" for c in dense),
                "not_applicable": sum(c.not_applicable is not None for c in mine) + len(skipped),
            }
        )
    return rows


def markdown(rows: list[dict]) -> str:
    lines = [
        "| suite | applicable | pass | without the sparse tests | sparse tests | not applicable |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        pct = 100 * r["passed"] / max(r["applicable"], 1)
        dense = 100 * r["dense_passed"] / max(r["dense"], 1)
        lines.append(
            f"| `{SUITES[r['suite']][0]}` | {r['applicable']} | {r['passed']} ({pct:.0f}%) | "
            f"{r['dense_passed']} of {r['dense']} ({dense:.0f}%) | "
            f"{r['sparse_passed']} of {r['sparse']} | "
            f"{r['not_applicable']} |"
        )
    return "\n".join(lines)


def at_world_size(cases: list[Case], size: int) -> list[Case]:
    """``cases`` with every test of a driven suite (``DRIVERS``) run by ``size`` ranks;
    the suite's own decorators then decide what runs at that size."""
    return [dataclasses.replace(c, world_size=size) if c.suite in DRIVERS else c for c in cases]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", choices=[*SUITES, "all"], default="all")
    parser.add_argument(
        "-k", dest="pattern", help="run only tests whose Class.name matches this regular expression"
    )
    parser.add_argument(
        "--failed", type=Path, help="run only the tests that failed in this earlier --json file"
    )
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per test (default 60)")
    parser.add_argument("--torch-dir", help="torch's testing/_internal/distributed directory")
    parser.add_argument(
        "--init",
        choices=["file", "tcp"],
        default="file",
        help="the init method the fixture gives (torch's default: file)",
    )
    parser.add_argument(
        "--world-size",
        type=int,
        help="ranks per test of a driven suite (default: torch's CI size, 3 for c10d); the "
        "suite's own decorators then skip or run its tests for worlds of 4 or 8",
    )
    parser.add_argument("--list", action="store_true", help="classify and list, run nothing")
    parser.add_argument("--json", type=Path, help="write every verdict here")
    parser.add_argument("--logs", type=Path, help="keep each rank's output here")
    parser.add_argument(
        "--markdown", action="store_true", help="print the summary as a Markdown table"
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="print the traceback of each failure"
    )
    args = parser.parse_args()

    global INIT
    INIT = args.init
    directory = torch_suite_dir(args.torch_dir)
    suites = list(SUITES) if args.suite == "all" else [args.suite]
    cases = [c for s in suites for c in collect(s, directory)]
    if args.world_size:
        if args.world_size < 2:
            parser.error("--world-size must be at least 2")
        cases = at_world_size(cases, args.world_size)
    if args.pattern:
        cases = [c for c in cases if re.search(args.pattern, c.label)]
    if args.failed:
        earlier = json.loads(args.failed.read_text())["results"]
        cases = [
            c for c in cases if earlier.get(f"{c.suite}.{c.label}", {}).get("status") == "fail"
        ]
    results: dict[str, dict] = {}
    for case in cases:
        key = f"{case.suite}.{case.label}"
        if case.not_applicable is not None:
            results[key] = {"status": "n/a", "error": case.not_applicable}
            print(f"N/A   {key}  ({case.not_applicable})", flush=True)
            continue
        if args.list:
            print(f"RUN   {key}", flush=True)
            continue
        verdict = run_case(case, args.timeout, args.logs)
        results[key] = verdict
        word = {"pass": "PASS", "fail": "FAIL", "skip": "SKIP"}[verdict["status"]]
        detail = f"  {verdict['error']}" if verdict["status"] != "pass" else ""
        print(
            f"{word:5} {key}  {verdict['seconds']}s{detail.splitlines()[0] if detail else ''}",
            flush=True,
        )
        if args.verbose and verdict.get("traceback"):
            print(verdict["traceback"], flush=True)
    rows = summarize(cases, results)
    for r in rows:
        print(json.dumps(r))
    if args.markdown:
        print(markdown(rows))
    if args.json:
        meta = {
            "date": datetime.datetime.now().isoformat(timespec="minutes"),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
            f"Python {platform.python_version()}",
            "command": " ".join(sys.argv),
        }
        args.json.write_text(
            json.dumps({"meta": meta, "summary": rows, "results": results}, indent=1)
        )


if __name__ == "__main__":
    main()
