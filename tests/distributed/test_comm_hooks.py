"""DDP's communication hooks on three real processes, against torch's.

One launch (``_comm_hook_workers.job``) trains the same model under DDP once per hook
configuration: PowerSGD (layer by layer at rank 1, at rank 3 with same shapes batched
(QR), cold-started without error feedback, at full rank, batched over the bucket, in
float16), a PowerSGD state restored from a pickle halfway, the float16 / bfloat16
wrappers, ``noop_hook``, no hook, each ``DDPCommHookType``, and the quantizing hooks.
Each test checks one behaviour: against torch 2.13's run of the same calls
(``golden/torch_comm_hooks.npz``, made by ``golden/make_comm_hook_golden.py``), and
where one exists against an oracle that needs neither library's hook (full-rank
PowerSGD is exact averaging; ``noop_hook`` is no averaging; the quantizing hooks, which
torch 2.13 cannot run, against NumPy).
"""

import numpy as np
import pytest

from tests._procs import run_and_collect
from tests._torch_golden import assert_like_torch
from tests.distributed import _comm_hook_workers as W
from tests.distributed.golden.make_comm_hook_golden import GOLDEN, RANKS, stored

# float32 PowerSGD after four compressed steps: torch's gloo sums the three ranks' factors
# in another order than the shared-memory engine, and error feedback carries the
# difference on; values are of order 1.
POWER_TOL = {"rtol": 2e-5, "atol": 2e-5}


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict]:
    """Every rank's results of one job."""
    return run_and_collect(W.job, RANKS, tmp_path_factory.mktemp("hooks"), timeout=240)


@pytest.fixture(scope="module")
def torch_run() -> dict[str, np.ndarray]:
    return dict(np.load(GOLDEN))


def _like_torch(ranks, torch_run, pattern: str, **tol) -> None:
    assert_like_torch(stored(ranks), torch_run, pattern, **(tol or POWER_TOL))


def _same(a: list, b: list) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("name", ["rank1", "cold_start", "batched", "batched_rank2_eps"])
def test_power_sgd_steps_and_state_are_torchs(ranks, torch_run, name):
    _like_torch(ranks, torch_run, rf"^\d+/power/{name}/")


def test_power_sgd_at_rank_3_orthogonalizes_by_qr_as_torch(ranks, torch_run):
    name = "rank3_batched_same_shapes"
    _like_torch(ranks, torch_run, rf"^\d+/power/{name}/(steps|state/(q_memory|error))")
    # P's third column is orthogonalized out of a direction about 100x smaller than its
    # first: float32 rounding grows by as much there
    _like_torch(ranks, torch_run, rf"^\d+/power/{name}/state/p_memory", rtol=0, atol=1e-4)


def test_power_sgd_in_float16_is_torchs_to_float16_rounding(ranks, torch_run):
    # float16 sums of three ranks rounded in another order (see POWER_TOL): a few units in
    # the last place (2**-10 at 1) of values of order 1 after two compressed steps
    _like_torch(ranks, torch_run, r"^\d+/power/fp16_rank1/", rtol=0, atol=4 * 2.0**-10)


def test_power_sgd_leaves_every_rank_with_the_same_parameters(ranks):
    for name in W.POWER:
        for step in range(W.STEPS):
            first = ranks[0]["power"][name]["steps"][step]
            assert all(_same(first, got["power"][name]["steps"][step]) for got in ranks), (
                name,
                step,
            )


def test_full_rank_power_sgd_is_plain_averaging(ranks, torch_run):
    # P spans every gradient's columns at full rank, so P P^T M = M: torch's plain DDP
    for rank in range(RANKS):
        for step in range(W.STEPS):
            for j, got in enumerate(ranks[rank]["power"]["full_rank"]["steps"][step]):
                want = torch_run[f"{rank}/simple/none/{step}/{j}"]
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=(step, j))


def test_full_rank_power_sgd_in_several_buckets_is_plain_averaging(ranks, torch_run):
    for rank, got in enumerate(ranks):
        run = got["ours_only"]["full_rank_in_buckets"]
        assert run["buckets"] == [0, 1, 2]  # one layer each, the last first
        for step in range(W.STEPS):
            for j, value in enumerate(run["steps"][step]):
                want = torch_run[f"{rank}/simple/none/{step}/{j}"]
                np.testing.assert_allclose(value, want, rtol=1e-5, atol=1e-6, err_msg=(step, j))


def test_power_sgd_compresses_what_torch_compresses(ranks, torch_run):
    # rank 1, one bucket of 8x8, 8x8, 3x8 weights and biases: each weight (n + m) * 1
    # elements, the biases whole; the statistics count each compressed step
    stats = ranks[0]["power"]["rank1"]["state"]["stats"]
    per_step_before = 64 + 8 + 64 + 8 + 24 + 3
    per_step_after = 16 + 8 + 16 + 8 + 11 + 3
    steps = W.STEPS - 2
    assert stats[1:] == [per_step_before * steps, per_step_after * steps]
    assert stats[0] == pytest.approx(per_step_before / per_step_after)
    _like_torch(ranks, torch_run, r"^\d+/power/\w+/(state/(iter|stats)|bucket_shapes)")


def test_the_first_iterations_are_plain_averaging(ranks):
    # start_powerSGD_iter=2: steps 0 and 1 as without a hook
    plain = ranks[0]["simple"]["none"]
    for name in ("rank1", "batched", "rank3_batched_same_shapes"):
        for step in (0, 1):
            got = ranks[0]["power"][name]["steps"][step]
            for a, b in zip(got, plain[step], strict=True):
                np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_a_state_restored_from_a_pickle_goes_on_as_the_original(ranks, torch_run):
    for got in ranks:
        assert got["restored"]["default_group"] is True
        for step in range(W.STEPS):
            assert _same(got["restored"]["steps"][step], got["power"]["rank1"]["steps"][step])
    _like_torch(ranks, torch_run, r"^\d+/restored/")


# One float16 unit in the last place of a gradient below 1, times the learning rate: a
# float32 gradient one ulp apart (jax 0.12 rounds some products differently) can round
# to the neighbouring float16.
FP16_STEP_TOL = {"rtol": 0, "atol": 2.0**-10 * 0.1}


def test_the_float16_wrapper_of_allreduce_is_fp16_compress_hook(ranks, torch_run):
    # torch: "fp16_compress_hook is equivalent to fp16_compress_wrapper(allreduce_hook)"
    for step in range(2):
        wrapped = ranks[0]["simple"]["fp16_wrapped_allreduce"][step]
        assert _same(wrapped, ranks[0]["by_type"]["FP16_COMPRESS"][step])
    _like_torch(ranks, torch_run, r"^\d+/simple/fp16_wrapped_allreduce/", **FP16_STEP_TOL)


def test_the_bfloat16_wrapper_of_allreduce_is_bf16_compress_hook(ranks):
    # torch 2.13 refuses bfloat16 hooks on a CPU; the wrapper's identity is the oracle
    for got in ranks:
        bf16, plain = got["ours_only"]["bf16"], got["simple"]["none"]
        for step in range(W.STEPS):
            assert _same(bf16["bf16_wrapped_allreduce"][step], bf16["bf16_compress_hook"][step])
            for a, b in zip(bf16["bf16_compress_hook"][step], plain[step], strict=True):
                np.testing.assert_allclose(a, b, rtol=0, atol=1e-2)  # bfloat16's 8 bits
        assert not _same(bf16["bf16_compress_hook"][0], plain[0])


def _numpy_quantized_mean(buckets: list[np.ndarray], chunk: int | None) -> np.ndarray:
    """The mean of each rank's bucket sent as unsigned 8-bit integers, in NumPy: a
    min-max affine scale and zero point per rank (per chunk of ``chunk`` elements, the
    bucket padded with zeros to whole chunks, one more when it divides evenly)."""
    n = buckets[0].size
    total = np.zeros(n if chunk is None else (n // chunk + 1) * chunk, np.float32)
    for b in buckets:
        x = b.astype(np.float32)
        if chunk is not None:
            x = np.pad(x, (0, chunk - n % chunk)).reshape(-1, chunk)
        lo = np.minimum(x.min(axis=-1, keepdims=True), 0).astype(np.float32)
        hi = np.maximum(x.max(axis=-1, keepdims=True), 0).astype(np.float32)
        scale = np.maximum((hi - lo) / np.float32(255), np.finfo(np.float32).eps)
        zero = np.clip(-np.round(lo / scale), 0, 255).astype(np.float32)
        q = np.clip(np.round(x / scale) + zero, 0, 255).astype(np.uint8)
        total += (scale * (q.astype(np.float32) - zero)).ravel()
    return (total / len(buckets))[:n]


@pytest.mark.parametrize(("name", "chunk"), [("per_tensor", None), ("per_chunk_64", 64)])
def test_quantizing_hooks_average_what_numpy_quantizes(ranks, name, chunk):
    # torch 2.13's quantizing hooks raise at their first call: NumPy is the oracle
    got = [r["ours_only"]["quantized"][name] for r in ranks]
    want = _numpy_quantized_mean([g["bucket"] for g in got], chunk)
    for g in got:
        np.testing.assert_allclose(g["averaged"], want, rtol=1e-6, atol=1e-7)
    exact = np.mean([g["bucket"] for g in got], axis=0)
    assert not np.array_equal(want, exact)  # the quantization shows
    np.testing.assert_allclose(want, exact, rtol=0, atol=0.02)
    for step in range(W.STEPS):
        assert all(_same(got[0]["steps"][step], g["steps"][step]) for g in got[1:])


def test_a_custom_hook_built_on_allreduce_fut_averages_as_torchs(ranks, torch_run):
    for got in ranks:
        for step in range(W.STEPS):
            assert _same(got["simple"]["custom_allreduce_fut"][step], got["simple"]["none"][step])
    _like_torch(ranks, torch_run, r"^\d+/simple/custom_allreduce_fut/", rtol=1e-6, atol=1e-7)


def test_noop_hook_leaves_each_rank_its_own_gradients(ranks, torch_run):
    assert not _same(ranks[0]["simple"]["noop"][0], ranks[1]["simple"]["noop"][0])
    _like_torch(ranks, torch_run, r"^\d+/simple/(noop|none)/", rtol=1e-6, atol=1e-7)


def test_each_comm_hook_type_registers_torchs_hook(ranks, torch_run):
    names = [str(torch_run[f"0/hook_types/{i}"]) for i in range(len(ranks[0]["hook_types"]))]
    assert ranks[0]["hook_types"] == names
    _like_torch(ranks, torch_run, r"^\d+/by_type/(?!FP16)", rtol=1e-6, atol=1e-7)
    _like_torch(ranks, torch_run, r"^\d+/by_type/FP16", **FP16_STEP_TOL)


def test_buckets_are_laid_out_as_torchs(ranks, torch_run):
    # four (512, 512) weights and biases, last first: the default cap's first bucket is
    # 1 MiB (one layer), the rest 25 MiB; a cap the user sets holds for the first bucket
    assert ranks[0]["bucket_layout"] == {
        "default": [2, 6],
        "2MiB": [4, 4],
        "half_MiB": [2, 2, 2, 2],
    }
    _like_torch(ranks, torch_run, r"^\d+/bucket_layout/")


def test_power_sgd_refuses_an_early_start_with_error_feedback(ranks, torch_run):
    for rank, got in enumerate(ranks):
        text = got["errors"]["start_1_with_error_feedback"]
        assert text.startswith("ValueError: Expect `start_powerSGD_iter` > 1")
        assert text == str(torch_run[f"errors/{rank}/start_1_with_error_feedback"])


def test_the_golden_file_holds_torchs_values(torch_run):
    pytest.importorskip(
        "torch", reason="torch recomputes the golden values; without it the file is used as it is"
    )
    from tests.distributed.golden.make_comm_hook_golden import torch_results

    fresh = stored(torch_results())
    assert_like_torch(fresh, torch_run, "", rtol=1e-6, atol=0)
