"""``DistributedDataParallel`` in 4 real processes, against ``jax.grad`` on the whole batch.

One job (``_ddp_workers.scenarios``) runs every scenario once and hands back what
each rank saw; each test checks one behaviour. The oracle is the same model written
in ``jax.numpy``: with equal batch sizes, the average of the ranks' gradients of
their mean losses is the gradient of the mean loss over the concatenated batch.
float32 gradients agree to ``rtol=1e-5, atol=1e-6`` (``rtol=1e-4`` after the join test's
SGD steps); the fp16 hook's to ``2e-3``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests._procs import run_and_collect
from tests.distributed import _ddp_cases as C
from tests.distributed import _ddp_workers as W

N = 4
RTOL, ATOL = 1e-5, 1e-6  # float32


@pytest.fixture(scope="module")
def got(tmp_path_factory) -> list[dict]:
    return run_and_collect(W.scenarios, N, tmp_path_factory.mktemp("ddp"), timeout=240)


# ------------------------------------------------------------------ the oracle
def _mlp_loss(p: dict, x: np.ndarray, y: np.ndarray) -> jax.Array:
    h = jnp.tanh(x @ p["0.weight"].T + p["0.bias"])
    return jnp.mean((h @ p["2.weight"].T + p["2.bias"] - y) ** 2)


def _branches_loss(p: dict, x: np.ndarray, y: np.ndarray, use_b: bool) -> jax.Array:
    out = x @ p["a.weight"].T + p["a.bias"]
    if use_b:
        out = out + x @ p["b.weight"].T + p["b.bias"]
    return jnp.mean((out - y) ** 2)


def _grad(loss, params: dict, *args) -> dict[str, np.ndarray]:
    p = {k: jnp.asarray(v) for k, v in params.items()}
    return {k: np.asarray(v) for k, v in jax.grad(loss)(p, *args).items()}


def _mean(grads: list[dict]) -> dict[str, np.ndarray]:
    return {k: sum(g[k] for g in grads) / len(grads) for k in grads[0]}


def _close(got: dict, want: dict, rtol: float = RTOL, atol: float = ATOL, what: str = "") -> None:
    assert sorted(got) == sorted(want), what
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=rtol, atol=atol, err_msg=f"{what} {k}")


# ------------------------------------------------------------------ gradients
@pytest.mark.parametrize("tag", ["shm-4", "tcp-4", "shm-2", "tcp-2"])
def test_gradients_equal_one_process_on_the_concatenated_batch(got, tag):
    n = int(tag.split("-")[1])
    params = got[0][f"{tag}/params"]
    xs = np.concatenate([C.batch(r)[0] for r in range(n)])
    ys = np.concatenate([C.batch(r)[1] for r in range(n)])
    want = _grad(_mlp_loss, params, xs, ys)
    assert got[0][f"{tag}/buckets"] > 1  # several buckets, each reduced on its own
    for r in range(n):
        _close(got[r][f"{tag}/params"], params, what=f"rank {r} start")
        _close(got[r][f"{tag}/grads"], want, what=f"rank {r}")


def test_constructor_broadcasts_rank_0s_parameters(got):
    # each rank seeded its own weights; after DDP() every rank holds rank 0's
    import tensorplay_jax as tp

    tp.manual_seed(0)
    fresh = W._mlp()
    mine = {n: np.asarray(p.detach().value) for n, p in fresh.named_parameters()}
    for r in range(N):
        _close(got[r]["shm-4/params"], mine, rtol=0, atol=0, what=f"rank {r}")


# ------------------------------------------------------------------ overlap
def test_first_bucket_is_reduced_before_the_backward_pass_is_done(got):
    for r in range(N):
        events = got[r]["overlap/events"]
        at = dict(events)
        assert got[r]["overlap/buckets"] == 4
        names = [e for e, _ in events if e.startswith("bucket")]
        assert names == ["bucket0", "bucket1", "bucket2", "bucket3"], events
        # bucket 0 (the last layer) went while the first layer's gradient was still
        # being computed, and every bucket before backward returned
        assert at["bucket0"] < at["layer0"], events
        assert at["bucket3"] < at["end"], events


# ------------------------------------------------------------------ no_sync
def test_no_sync_keeps_gradients_local(got):
    params = got[0]["no_sync/params"]
    for r in range(N):
        want = _grad(_mlp_loss, params, *C.batch(r, 1))
        _close(got[r]["no_sync/local"], want, what=f"rank {r}")


def test_the_next_synced_backward_averages_what_accumulated(got):
    params = got[0]["no_sync/params"]
    per_rank = [
        {
            k: a + b
            for (k, a), b in zip(
                _grad(_mlp_loss, params, *C.batch(r, 1)).items(),
                _grad(_mlp_loss, params, *C.batch(r, 2)).values(),
                strict=True,
            )
        }
        for r in range(N)
    ]
    want = _mean(per_rank)
    for r in range(N):
        _close(got[r]["no_sync/synced"], want, what=f"rank {r}")


# ------------------------------------------------------------------ unused parameters
def test_a_parameter_used_only_without_sync_is_averaged_at_the_next_sync(got):
    # rank 0 used a (no_sync) then b; the others c then d: every parameter ends with one
    # gradient on every rank, the mean over ranks of what each accumulated
    local = [got[r]["no_sync_unused/local"] for r in range(N)]
    synced = [got[r]["no_sync_unused/synced"] for r in range(N)]
    a_sum = sum(
        np.asarray(local[r]["a.weight"]) for r in range(N) if local[r]["a.weight"] is not None
    )
    for r in range(N):
        assert all(g is not None for g in synced[r].values()), (r, synced[r])
        _close(synced[r], synced[0], what=f"rank {r} against rank 0")
    assert local[0]["a.weight"] is not None and local[1]["a.weight"] is None
    np.testing.assert_allclose(synced[0]["a.weight"], a_sum / N, rtol=1e-6)
    c_sum = sum(np.asarray(local[r]["c.weight"]) for r in range(1, N))
    np.testing.assert_allclose(synced[0]["c.weight"], c_sum / N, rtol=1e-6)


def test_find_unused_parameters_averages_a_branch_only_some_ranks_use(got):
    params = got[0]["unused/params"]
    per_rank = [
        _grad(
            lambda p, x, y, r=r: _branches_loss(p, x, y, use_b=r == 1),
            {k: v for k, v in params.items() if not k.startswith("c.")},
            *C.batch(r, 3),
        )
        for r in range(N)
    ]
    want = _mean(per_rank)  # branch b: rank 1's gradient over 4, the others gave zeros
    for r in range(N):
        grads = got[r]["unused/grads"]
        assert grads["c.weight"] is None and grads["c.bias"] is None  # unused everywhere
        _close({k: v for k, v in grads.items() if v is not None}, want, what=f"rank {r}")


def test_without_find_unused_parameters_the_next_forward_names_them(got):
    for r in range(N):
        err = got[r]["unused/error"]
        assert err.startswith("RuntimeError: Expected to have finished reduction in the prior")
        assert "find_unused_parameters=True" in err
        assert f"did not receive grad for rank {r}: 4 5" in err
        assert f"did not receive grad for rank {r}: c.weight, c.bias" in err


# ------------------------------------------------------------------ buffers
def test_broadcast_buffers_gives_every_rank_rank_0s_buffers_at_forward(got):
    for r in range(N):
        np.testing.assert_array_equal(got[r]["buffers/True/in_forward"], np.full(3, 1.0))


def test_without_broadcast_buffers_each_rank_keeps_its_own(got):
    for r in range(N):
        np.testing.assert_array_equal(got[r]["buffers/False/in_forward"], np.full(3, r + 1.0))


# ------------------------------------------------------------------ comm hooks
def test_fp16_compress_hook_averages_in_half_precision(got):
    params = got[0]["fp16/params"]
    want = _mean([_grad(_mlp_loss, params, *C.batch(r, 4)) for r in range(N)])
    for r in range(N):
        _close(got[r]["fp16/grads"], want, rtol=2e-3, atol=2e-3, what=f"rank {r}")


def test_a_second_comm_hook_is_torchs_error(got):
    assert got[0]["fp16/register_twice"] == (
        "RuntimeError: register_comm_hook or register_builtin_comm_hook can only be called once."
    )


# ------------------------------------------------------------------ the module
def test_the_wrapped_module_and_state_dict_keys_as_torch_has_them(got):
    assert got[0]["api/module_is_the_model"]
    assert got[0]["api/state_dict"] == [
        "module.0.weight",
        "module.0.bias",
        "module.2.weight",
        "module.2.bias",
    ]


def test_bad_arguments_are_clear_errors(got):
    assert got[0]["api/hook_not_callable"] == "TypeError: Communication hook must be callable."
    assert got[0]["api/two_devices"].startswith("ValueError: DistributedDataParallel: device_ids")


def test_a_saved_and_loaded_ddp_model_averages_gradients_as_before(got):
    params = got[0]["pickled/params"]
    xs = np.concatenate([C.batch(r)[0] for r in range(N)])
    ys = np.concatenate([C.batch(r)[1] for r in range(N)])
    want = _grad(_mlp_loss, params, xs, ys)
    for r in range(N):
        _close(got[r]["pickled/params"], params, what=f"rank {r} loaded")
        _close(got[r]["pickled/grads"], want, what=f"rank {r}")


def test_a_ddp_model_on_another_group_refuses_to_be_saved_as_torchs(got):
    assert got[0]["pickled/subgroup"].startswith(
        "RuntimeError: DDP Pickling/Unpickling are only supported when using DDP with the "
        "default process group."
    )


def test_a_module_without_trainable_parameters_is_torchs_error():
    import tensorplay_jax as tp
    from tensorplay_jax.nn.parallel import DistributedDataParallel

    frozen = tp.nn.Linear(2, 2).requires_grad_(False)
    with pytest.raises(RuntimeError, match="DistributedDataParallel is not needed when a module"):
        DistributedDataParallel(frozen)


def test_without_a_process_group_it_says_to_start_one():
    import tensorplay_jax as tp
    from tensorplay_jax.nn.parallel import DistributedDataParallel

    with pytest.raises(RuntimeError, match=r"call tensorplay_jax\.distributed\.init_process_group"):
        DistributedDataParallel(tp.nn.Linear(2, 2))


# ------------------------------------------------------------------ join
def _join_oracle(params: dict) -> tuple[list[dict], dict]:
    """Each step's averaged gradients, and the model after the last SGD step."""
    steps, p = [], dict(params)
    for s in range(max(C.uneven_steps(q) for q in range(N))):
        active = [q for q in range(N) if C.uneven_steps(q) > s]
        local = [_grad(_mlp_loss, p, *C.batch(q, 10 + s)) for q in active]
        # joined ranks add zeros; the sum is divided by the initial world size
        grads = {k: sum(g[k] for g in local) / N for k in local[0]}
        steps.append(grads)
        p = {k: p[k] - C.LR * grads[k] for k in p}
    return steps, p


def test_join_with_uneven_inputs_averages_over_every_rank(got):
    want, _ = _join_oracle(got[0]["join/params"])
    for r in range(N):
        steps = got[r]["join/grads"]
        assert len(steps) == C.uneven_steps(r)
        for s, grads in enumerate(steps):
            _close(grads, want[s], rtol=1e-4, atol=1e-6, what=f"rank {r} step {s}")


def test_join_ends_with_the_last_joiners_model_everywhere(got):
    _, final = _join_oracle(got[0]["join/params"])
    for r in range(N):
        assert got[r]["join/seconds"] < 30  # no hang: every wait has a timeout anyway
        _close(got[r]["join/final_params"], final, rtol=1e-4, atol=1e-6, what=f"rank {r}")


def test_join_throw_on_early_termination_raises_on_every_rank(got):
    for r in range(N):
        assert got[r]["join/throw"] == (
            "RuntimeError: Detected at least one rank that exhausted inputs. "
            "Throwing across all ranks."
        ), r


# ------------------------------------------------------------------ distributed autograd
def test_dist_autograd_context_holds_the_averaged_gradients(got):
    params = got[0]["dist_autograd/params"]
    want = _mean([_grad(_mlp_loss, params, *C.batch(r, 20)) for r in range(N)])
    for r in range(N):
        assert got[r]["dist_autograd/grad_is_none"]  # into the context, not .grad
        _close(got[r]["dist_autograd/ctx"], want, what=f"rank {r} context")
        _close(got[r]["dist_autograd/local"], want, what=f"rank {r} local")


def test_a_remote_module_feeding_ddp_gets_local_gradients_and_ddp_averaged_ones(got):
    # torch's test_ddp_dist_autograd_local_vs_remote, with jax.grad as the oracle; each
    # rank made its own remote module on w0 (its own weights), and a local copy of it
    layer2 = got[0]["remote/layer2"]

    def loss(p, x):
        return jnp.sum((x @ p["w1"].T) @ p["weight"].T + p["bias"])

    xs = [np.random.RandomState(30 + r).rand(10, 10).astype(np.float32) for r in range(N)]
    per_rank = [_grad(loss, {"w1": got[r]["remote/w1"], **layer2}, x) for r, x in enumerate(xs)]
    want_w2 = _mean(per_rank)["weight"]  # DDP averages the dense layer
    for r in range(N):
        for w2, g1 in (got[r]["remote/local"], got[r]["remote/ctx"]):
            np.testing.assert_allclose(w2, want_w2, rtol=RTOL, atol=ATOL, err_msg=f"rank {r}")
            # the remote layer is not under DDP: its gradient is this rank's own
            np.testing.assert_allclose(g1, per_rank[r]["w1"], rtol=RTOL, atol=ATOL)


def test_ddp_around_a_forward_through_another_worker_averages_every_gradient(got):
    # torch's test_backward_ddp_outside: fc1's gradient reaches this worker over RPC after
    # its own pass reached the send; DDP's end-of-backward waits for the whole share.
    # Oracle: jax.grad of each rank's loss, averaged for the DDP parameters (fc1, fc2),
    # each rank's own for the remote layer.
    params = got[0]["outside/params"]

    def loss(p, x):
        h = x @ p["fc1.weight"].T + p["fc1.bias"]
        h = h @ p["remote.weight"].T + p["remote.bias"]
        return jnp.sum(h @ p["fc2.weight"].T + p["fc2.bias"])

    per_rank = []
    for r in range(N):
        x = np.random.RandomState(70 + r).rand(5, 3).astype(np.float32)
        remote = {f"remote.{k}": v for k, v in got[r]["outside/remote"].items()}
        per_rank.append(_grad(loss, {**params, **remote}, x))
    want = _mean(per_rank)
    for r in range(N):
        assert got[r]["outside/params"].keys() == params.keys()  # fc1 and fc2, no RRef
        ddp_part = {k: want[k] for k in params}
        _close(got[r]["outside/ctx"], ddp_part, what=f"rank {r} DDP parameters")
        own = {
            k.removeprefix("remote."): v for k, v in per_rank[r].items() if k.startswith("remote.")
        }
        _close(got[r]["outside/remote_ctx"], own, what=f"rank {r} remote layer")


def test_sparse_embedding_gradients_are_averaged_under_dist_autograd(got):
    # torch's test_ddp_dist_autograd_sparse_grads: one gradient in the context, the same
    # as a local backward; here also equal to the average over the ranks of each row's
    # weight in the bags (mode "mean": bag [0, 4) counts 1/4 a row, bag [4, 10) 1/6)
    counts = []
    for r in range(N):
        idx = np.random.RandomState(40 + r).randint(0, 10, 10)
        w = np.bincount(idx[:4], minlength=10) / 4 + np.bincount(idx[4:], minlength=10) / 6
        counts.append(w)
    want = np.repeat((sum(counts) / N)[:, None], 3, axis=1)
    for r in range(N):
        assert got[r]["sparse/ctx_keys"] == 1
        np.testing.assert_allclose(got[r]["sparse/ctx"], want, rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(got[r]["sparse/local"], want, rtol=RTOL, atol=ATOL)
