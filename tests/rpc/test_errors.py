"""RPC errors have tensorplay's types: ``RuntimeError`` (and the type raised here before).

A port's ``except RuntimeError:`` and tensorplay's own tests (which match types and
message regexes) expect RuntimeError where tensorplay raises it; the classes here
also keep the type this package raised before (``ValueError``, ``TypeError``), so
code that catches that keeps working. One job of two workers: ``w0`` is the test
process, ``w1`` a started worker.
"""

from __future__ import annotations

import gc
import sys

import pytest

import tensorplay_jax as tp
import tensorplay_jax.distributed.autograd as dist_autograd
from tensorplay_jax.distributed import rpc
from tensorplay_jax.futures import Future
from tensorplay_jax.runtime.settings import LOG_CALL_ERRORS_ENV
from tests._worker import expect, wait_until
from tests.rpc import _error_targets as E
from tests.rpc._jobs import rpc_job


@pytest.fixture(scope="module")
def job():
    with rpc_job(2, "local") as w:
        yield w


# ----------------------------------------------------------------- destinations
@pytest.mark.parametrize("to", ["nope", 7, -1], ids=["name", "rank", "negative-rank"])
@pytest.mark.parametrize("call", [rpc.rpc_sync, rpc.rpc_async, rpc.remote])
def test_an_unknown_destination_is_a_runtime_error(job, call, to):
    e = expect(RuntimeError, ["could not find destination", "w1 (rank 1)"], call, to, max, (1, 2))
    assert isinstance(e, ValueError) and isinstance(e, rpc.UnknownWorkerError)


def test_get_worker_info_of_an_unknown_name_is_a_runtime_error(job):
    e = expect(RuntimeError, ["could not find destination", "'WorkerUnknown'"],
               rpc.get_worker_info, "WorkerUnknown")  # fmt: skip
    assert isinstance(e, ValueError)


@pytest.mark.parametrize("to", [0.5, 1.5])
def test_a_fractional_rank_is_a_value_error(job, to):
    e = expect(ValueError, ["must be a worker name, a rank (int) or a WorkerInfo"],
               rpc.rpc_sync, to, max, args=(1, 2))  # fmt: skip
    assert isinstance(e, TypeError)  # what it was before


# ----------------------------------------------------------------- on the callee
def test_a_function_that_does_not_import_on_the_callee_is_a_runtime_error(job, tmp_path):
    # a module only the caller can import: the workers' PYTHONPATH was set at start-up
    (tmp_path / "tpj_only_on_the_caller.py").write_text("def f():\n    return 1\n")
    sys.path.insert(0, str(tmp_path))
    try:
        import tpj_only_on_the_caller as mod

        says = ["cannot import tpj_only_on_the_caller.f", "does not serialize the code"]
        e = expect(RuntimeError, says, rpc.rpc_sync, "w1", mod.f)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("tpj_only_on_the_caller", None)
    assert isinstance(e, ValueError)  # a DecodeError, as before


@pytest.mark.parametrize(
    ("a", "b", "says"),
    [
        ((3, 3), (6, 6), "dot_general requires contracting dimensions"),
        ((10,), (5,), "incompatible shapes for broadcasting"),
    ],
    ids=["matmul", "broadcast"],
)
def test_an_operator_with_operands_that_do_not_fit_is_a_runtime_error(job, a, b, says):
    op = tp.matmul if len(a) == 2 else tp.add
    e = expect(RuntimeError, [says, "Remote traceback", "'w1'"],
               rpc.rpc_sync, "w1", op, args=(tp.ones(*a), tp.ones(*b)))  # fmt: skip
    assert isinstance(e, TypeError)  # JAX's type


def test_an_async_execution_function_must_return_a_future(job):
    says = [
        "async_returns_an_int",
        "must return a torch.futures.Future object,",
        "but got builtins.int",
    ]
    e = expect(RuntimeError, says, rpc.rpc_sync, "w1", E.async_returns_an_int)
    assert isinstance(e, TypeError) and isinstance(e, rpc.RpcError)
    e = expect(RuntimeError, says, rpc.remote("w1", E.async_returns_an_int).to_here)
    assert isinstance(e, TypeError)


@pytest.mark.parametrize("call", [rpc.rpc_sync, rpc.rpc_async, rpc.remote])
def test_a_future_as_an_argument_is_a_runtime_error(job, call):
    e = expect(RuntimeError, ["Can not pickle torch.futures.Future"],
               call, "w1", E.takes_anything, args=(Future(),))  # fmt: skip
    assert isinstance(e, TypeError)


def test_the_callee_prints_a_called_functions_error_to_stderr(job, capsys, monkeypatch):
    monkeypatch.setenv(LOG_CALL_ERRORS_ENV, "1")  # rpc_job turns it off; w0 is the callee
    says = ["Expected error"]
    expect(ValueError, says, job.run, "w1", E.call, "w0", E.raise_value, "Expected error")
    err = capsys.readouterr().err
    assert "On WorkerInfo(name='w0', id=0):\nValueError('Expected error')" in err, err
    assert "in raise_value" in err, err  # the traceback


def test_a_called_functions_error_is_not_printed_when_turned_off(job, capsys, monkeypatch):
    monkeypatch.setenv(LOG_CALL_ERRORS_ENV, "0")
    expect(ValueError, ["quiet"], job.run, "w1", E.call, "w0", E.raise_value, "quiet")
    assert "quiet" not in capsys.readouterr().err


# ----------------------------------------------------------------- RRef.backward
def test_rref_backward_of_a_non_scalar_is_a_runtime_error(job):
    rref = rpc.remote("w1", E.scaled_ones, args=(3,))
    with dist_autograd.context() as cid:
        expect(RuntimeError, ["shape (3,)", "scalar"], rref.backward, cid)


def test_rref_backward_of_a_value_that_is_not_a_tensor_is_a_runtime_error(job):
    rref = rpc.remote("w1", max, args=(1, 2))
    e = expect(RuntimeError, ["RRef should contain a tensor for .backward()"], rref.backward)
    assert isinstance(e, TypeError)  # what it was before


# ----------------------------------------------------------------- tensorplay's private helpers
def test_set_rpc_timeout_changes_get_rpc_timeout(job):
    before = rpc.get_rpc_timeout()
    try:
        rpc._set_rpc_timeout(7.5)
        assert rpc.get_rpc_timeout() == 7.5
    finally:
        rpc._set_rpc_timeout(before)
    assert rpc.get_rpc_timeout() == before


def test_rref_context_debug_info_counts_owned_values(job):
    def owned() -> int:
        return int(rpc._rref_context_get_debug_info()["num_owner_rrefs"])

    mine = rpc.remote("w0", E.takes_anything, args=(1, 2))  # owned here, held here
    assert mine.to_here() == 2
    with_mine = owned()
    assert with_mine >= 1
    info = rpc._get_debug_info()
    assert info["num_pending_futures"] == "0" and info["name"] == "w0"
    assert {"num_forks", "num_pending_users"} <= info.keys()
    del mine
    gc.collect()
    wait_until(lambda: owned() < with_mine)  # other tests' values may go at any time too


def test_dist_autograd_private_helpers(job):
    assert dist_autograd._get_max_id() == (0 << 48) + (1 << 48) - 1  # rank 0
    with dist_autograd.context() as cid:
        t = tp.ones(2, requires_grad=True)
        rpc.rpc_sync("w1", tp.mul, args=(t, 2.0))
        ctx = dist_autograd._retrieve_context(cid)
        assert ctx._known_worker_ids() == {1}
        assert len(ctx._send_functions()) == 1 and len(ctx._recv_functions()) == 1  # the reply
        assert cid <= dist_autograd._get_max_id()


def test_dist_autograd_graph_reads_as_tensorplays(job):
    with dist_autograd.context() as cid:
        t1, t2 = tp.ones(2, requires_grad=True), tp.ones(2, requires_grad=True)
        ret = rpc.rpc_sync("w1", tp.add, args=(t1, t2))
        ctx = dist_autograd._retrieve_context(cid)
        (send,) = ctx._send_functions().values()
        (recv,) = ctx._recv_functions().values()
    assert send.name() == "torch::distributed::autograd::SendRpcBackward"
    assert [(n.name(), n.variable, i) for n, i in send.next_functions] == [
        ("torch::autograd::AccumulateGrad", t1, 0),
        ("torch::autograd::AccumulateGrad", t2, 0),
    ]
    assert ret.grad_fn is recv and recv.name() == "torch::distributed::autograd::RecvRpcBackward"
    local = tp.add(t1, t2)
    assert local.grad_fn.name() == "AddBackward0" and local.grad_fn.name == "AddBackward"


# ----------------------------------------------------------------- names ported code uses
def test_the_rpc_api_module_has_tensorplays_name():
    import tensorplay_jax.distributed.rpc.api as api

    assert api is rpc.api and api.get_worker_info is rpc.get_worker_info
    api._ignore_rref_leak = False  # what tensorplay's tests set: harmless here


def test_the_options_derive_from_rpc_backend_options():
    assert isinstance(rpc.GrpcRpcBackendOptions(), rpc.RpcBackendOptions)
    assert issubclass(rpc.TensorPipeRpcBackendOptions, rpc.RpcBackendOptions)


def test_dist_autograd_debug_info_counts_contexts_and_passes(job):
    before = dist_autograd._get_debug_info()
    assert set(before) == {"num_current_backward_passes", "num_autograd_contexts"}
    with dist_autograd.context() as cid:
        t = tp.ones(2, requires_grad=True)
        y = rpc.rpc_sync("w1", tp.mul, args=(t, 2.0))
        during = dist_autograd._get_debug_info()
        dist_autograd.backward(cid, [y.sum()])
    assert int(during["num_autograd_contexts"]) == int(before["num_autograd_contexts"]) + 1
    wait_until(lambda: dist_autograd._get_debug_info() == before)  # released, no pass running
