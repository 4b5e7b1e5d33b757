"""Worker code for the tests of DDP's communication hooks, written once for both libraries.

``job``: three ranks train the same small model under ``DistributedDataParallel``, each on
its own batches, with SGD, once per hook configuration (``POWER``: PowerSGD layer by
layer at ranks 1, 3 and full rank, batched, cold-started, in float16; ``SIMPLE``: the
float16 / bfloat16 wrappers, ``noop_hook``, no hook; the quantizing hooks), once per
``DDPCommHookType`` member, and once with a PowerSGD state restored from a pickle
halfway. Each rank hands back the parameters after every step and the hook's state
(``tests._worker.hand_back``).

With ``TPJ_HOOK_ORACLE=torch`` the same calls run on torch's gloo
(``golden/make_comm_hook_golden.py`` stores the values), with two changes to torch
made here, both named in docs/porting.md: its PowerSGD draws the random initial ``Q``
as ours does (NumPy's standard normal from the seed torch draws), and its batched
hook orthogonalizes its one matrix as a batch of one (torch 2.13's raises
``AssertionError`` at its first compressed step).
"""

from __future__ import annotations

import datetime
import os
import pickle

import numpy as np

from tests._torch_golden import by_path
from tests._worker import error_text, hand_back

ORACLE = os.environ.get("TPJ_HOOK_ORACLE") == "torch"
if ORACLE:
    import torch as tp
    import torch.distributed as dist
    from torch.distributed.algorithms import ddp_comm_hooks as hooks
    from torch.distributed.algorithms.ddp_comm_hooks import debugging_hooks, default_hooks
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as power
    from torch.distributed.algorithms.ddp_comm_hooks import quantization_hooks as quant
    from torch.nn.parallel import DistributedDataParallel as DDP
else:
    import tensorplay_jax as tp
    import tensorplay_jax.distributed as dist
    from tensorplay_jax.distributed.algorithms import ddp_comm_hooks as hooks
    from tensorplay_jax.distributed.algorithms.ddp_comm_hooks import (
        debugging_hooks,
        default_hooks,
    )
    from tensorplay_jax.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as power
    from tensorplay_jax.distributed.algorithms.ddp_comm_hooks import quantization_hooks as quant
    from tensorplay_jax.nn.parallel import DistributedDataParallel as DDP

STEPS = 6


def init(i: int, shape: tuple[int, ...]) -> np.ndarray:
    """Parameter ``i``'s starting value."""
    n = int(np.prod(shape))
    return (np.sin(np.arange(n) * 0.7 + i) * 0.5).reshape(shape).astype(np.float32)


def batch(rank: int, step: int) -> tuple[np.ndarray, np.ndarray]:
    """Rank ``rank``'s inputs and targets at ``step``."""
    # phases quadratic in the index: full-rank batches (a linear phase gives rank 2)
    x = np.cos(np.arange(4 * 8) ** 2 * 0.37 + 10 * rank + step).reshape(4, 8)
    y = np.sin(np.arange(4 * 3) ** 2 * 0.23 - rank - 2 * step).reshape(4, 3)
    return x.astype(np.float32), y.astype(np.float32)


def model() -> tp.nn.Module:
    """Linear(8, 8), Tanh, Linear(8, 8), Tanh, Linear(8, 3): two 8x8 weights (one batch
    when same shapes are batched), a 3x8 one and three biases; one bucket."""
    m = tp.nn.Sequential(
        tp.nn.Linear(8, 8), tp.nn.Tanh(), tp.nn.Linear(8, 8), tp.nn.Tanh(), tp.nn.Linear(8, 3)
    )
    with tp.no_grad():
        for i, p in enumerate(m.parameters()):
            p.copy_(tp.tensor(init(i, tuple(p.shape))))
    return m


def _values(params) -> list[np.ndarray]:
    return [p.detach().numpy().astype(np.float32) for p in params]


def _array(x) -> np.ndarray:
    if ORACLE:
        return x.detach().numpy().astype(np.float32)
    return np.asarray(x, np.float32)


def _torch_as_ours() -> None:
    """On torch, for the whole process: PowerSGD's random ``Q`` drawn as ours draws it, and
    the batched hook's one matrix orthogonalized as a batch of one (see the module
    docstring). Set once, not around each hook call: torch runs part of a hook in its
    future's callbacks, after the call returned."""
    orthogonalize = power._orthogonalize
    draws: list[np.random.RandomState] = []

    def numpy_seed(s: int) -> None:
        draws.append(np.random.RandomState(s))

    def numpy_randn(*shape, device=None, dtype=None):
        return tp.from_numpy(draws[-1].standard_normal(shape)).to(dtype)

    def as_batch(matrices, epsilon=0):
        orthogonalize(matrices.unsqueeze(0) if matrices.dim() == 2 else matrices, epsilon)

    tp.manual_seed, tp.randn, power._orthogonalize = numpy_seed, numpy_randn, as_batch


def _seen(hook, shapes: list):
    """``hook``, recording the parameter shapes of each bucket it gets (in its order)."""

    def seen(state, bucket):
        shapes.append([list(p.shape) for p in bucket.parameters()])
        return hook(state, bucket)

    return seen


def _train(
    rank: int, register, steps: int = STEPS, bucket_cap_mb: float | None = None
) -> list[list[np.ndarray]]:
    """``steps`` SGD steps of the model under DDP (``register(ddp)`` sets its hook); the
    parameters after each."""
    ddp = DDP(model(), bucket_cap_mb=bucket_cap_mb)
    register(ddp)
    opt = tp.optim.SGD(ddp.parameters(), lr=0.1)
    out = []
    for step in range(steps):
        x, y = batch(rank, step)
        opt.zero_grad()
        ((ddp(tp.tensor(x)) - tp.tensor(y)) ** 2).mean().backward()
        opt.step()
        out.append(_values(ddp.parameters()))
    return out


def _power_state(state) -> dict:
    """What a PowerSGD state holds after a run (bucket 0's memories)."""
    got = {
        "iter": state.iter,
        "stats": list(state.compression_stats()),
        "p_memory": {k: _array(v) for k, v in state.p_memory_dict.items()},
        "q_memory": {k: _array(v) for k, v in state.q_memory_dict.items()},
    }
    if state.use_error_feedback:
        got["error"] = {k: _array(v) for k, v in state.error_dict.items()}
    return got


POWER = {
    # name: (hook, PowerSGDState keywords, wrapper)
    "rank1": ("powerSGD_hook", {"matrix_approximation_rank": 1, "start_powerSGD_iter": 2}),
    "rank3_batched_same_shapes": (
        "powerSGD_hook",
        {
            "matrix_approximation_rank": 3,
            "start_powerSGD_iter": 2,
            "min_compression_rate": 1,
            "batch_tensors_with_same_shape": True,
        },
    ),
    "cold_start": (
        "powerSGD_hook",
        {
            "matrix_approximation_rank": 2,
            "start_powerSGD_iter": 1,
            "min_compression_rate": 1,
            "warm_start": False,
            "use_error_feedback": False,
            "random_seed": 7,
        },
    ),
    "full_rank": (
        "powerSGD_hook",
        {
            "matrix_approximation_rank": 8,
            "start_powerSGD_iter": 1,
            "min_compression_rate": 0.01,
            "warm_start": False,
            "use_error_feedback": False,
        },
    ),
    "batched": (
        "batched_powerSGD_hook",
        {"matrix_approximation_rank": 1, "start_powerSGD_iter": 2},
    ),
    "batched_rank2_eps": (
        "batched_powerSGD_hook",
        {
            "matrix_approximation_rank": 2,
            "start_powerSGD_iter": 3,
            "orthogonalization_epsilon": 1e-8,
        },
    ),
    # two compressed steps: float16's rounding, summed in another order on torch's gloo,
    # grows with every step of the power iteration
    "fp16_rank1": ("powerSGD_hook", {"matrix_approximation_rank": 1, "start_powerSGD_iter": 4}),
}


def power_sgd(rank: int, name: str) -> dict:
    hook_name, kwargs = POWER[name]
    hook = getattr(power, hook_name)
    if name.startswith("fp16"):
        hook = default_hooks.fp16_compress_wrapper(hook)
    state = power.PowerSGDState(process_group=None, **kwargs)
    shapes: list = []
    steps = _train(rank, lambda ddp: ddp.register_comm_hook(state, _seen(hook, shapes)))
    return {"steps": steps, "state": _power_state(state), "bucket_shapes": shapes[-1]}


def full_rank_in_buckets(rank: int) -> dict:
    """Full-rank PowerSGD with each layer in a bucket of its own (ours only: torch 2.13's
    PowerSGD on gloo fails with two buckets); the bucket indices its hook saw."""
    state = power.PowerSGDState(process_group=None, **POWER["full_rank"][1])
    seen: list[int] = []

    def hook(state, bucket):
        seen.append(bucket.index())
        return power.powerSGD_hook(state, bucket)

    cap = 100 / 2**20  # bytes: each layer (weight and bias) fills a bucket
    steps = _train(rank, lambda ddp: ddp.register_comm_hook(state, hook), bucket_cap_mb=cap)
    return {"steps": steps, "buckets": seen[: len(seen) // STEPS]}


def restored(rank: int) -> dict:
    """The ``rank1`` configuration's run, its state replaced by a pickled copy of itself
    after three steps."""
    state = power.PowerSGDState(process_group=None, **POWER["rank1"][1])
    holder = [state]
    calls = []

    def hook(_, bucket):
        calls.append(bucket.index())
        if len(calls) == 4:
            holder[0] = pickle.loads(pickle.dumps(holder[0]))
        return power.powerSGD_hook(holder[0], bucket)

    steps = _train(rank, lambda ddp: ddp.register_comm_hook(None, hook))
    return {
        "steps": steps,
        "default_group": holder[0].process_group is dist.group.WORLD,
        "state": _power_state(holder[0]),
    }


def _custom_hook(state, bucket):
    """A user's hook as torch's tutorials write one: average with ``_allreduce_fut``."""
    return default_hooks._allreduce_fut(state, bucket.buffer())


SIMPLE = {
    "none": None,
    "noop": lambda: debugging_hooks.noop_hook,
    "custom_allreduce_fut": lambda: _custom_hook,
    "fp16_wrapped_allreduce": lambda: default_hooks.fp16_compress_wrapper(
        default_hooks.allreduce_hook
    ),
}

# Ours only: torch 2.13 refuses bfloat16 hooks without CUDA and NCCL (or XPU).
BF16 = {
    "bf16_compress_hook": lambda: default_hooks.bf16_compress_hook,
    "bf16_wrapped_allreduce": lambda: default_hooks.bf16_compress_wrapper(
        default_hooks.allreduce_hook
    ),
}


def simple(rank: int, name: str) -> list[list[np.ndarray]]:
    make = SIMPLE[name] if name in SIMPLE else BF16[name]
    if make is None:
        return _train(rank, lambda ddp: None)
    return _train(rank, lambda ddp: ddp.register_comm_hook(None, make()))


def quantized(rank: int, bucket_size: int | None) -> dict:
    """Training with a quantizing hook (per tensor, or per chunk of ``bucket_size``), and
    the first call's bucket and result. Ours only: torch 2.13's quantizing hooks raise
    at their first call (they read the all-gather's list of tensors as one tensor)."""
    seen: list = []

    def hook(state, bucket):
        if bucket_size is None:
            fut = quant.quantization_pertensor_hook(state, bucket)
        else:
            fut = quant.quantization_perchannel_hook(state, bucket, bucket_size=bucket_size)
        if not seen:
            seen.extend([_array(bucket.buffer()), _array(fut.wait())])
        return fut

    steps = _train(rank, lambda ddp: ddp.register_comm_hook(None, hook))
    return {"steps": steps, "bucket": seen[0], "averaged": seen[1]}


def by_type(rank: int) -> dict:
    """Two steps with each ``DDPCommHookType`` torch runs on a CPU (not the quantizing
    ones, see ``quantized``, nor bfloat16, see ``BF16``)."""
    return {
        t.name: _train(rank, lambda ddp, t=t: hooks.register_ddp_comm_hook(t, ddp), steps=2)
        for t in hooks.DDPCommHookType
        if not t.name.startswith(("QUANTIZE", "BF16"))
    }


def bucket_layout() -> dict:
    """How many parameters each bucket holds (in index order) on a model of four 1 MiB
    weights, for the default cap, a 2 MiB cap and a 0.5 MiB one: read by a hook at the
    second backward pass (torch lays its buckets out again after the first)."""
    out = {}
    for name, cap in (("default", None), ("2MiB", 2), ("half_MiB", 0.5)):
        ddp = DDP(tp.nn.Sequential(*[tp.nn.Linear(512, 512) for _ in range(4)]), bucket_cap_mb=cap)
        sizes: list[int] = []

        def hook(state, bucket, sizes=sizes):
            sizes.append(len(bucket.parameters()))
            return default_hooks.allreduce_hook(state, bucket)

        ddp.register_comm_hook(None, hook)
        for _ in range(2):
            sizes.clear()
            ddp(tp.tensor(np.ones((2, 512), np.float32))).sum().backward()
        out[name] = list(sizes)
    return out


def job() -> None:
    if ORACLE:
        _torch_as_ours()
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    else:
        dist.init_process_group("gloo", timeout=60)
    rank = dist.get_rank()
    got = {
        "power": {name: power_sgd(rank, name) for name in POWER},
        "restored": restored(rank),
        "simple": {name: simple(rank, name) for name in SIMPLE},
        "by_type": by_type(rank),
        "hook_types": [t.name for t in hooks.DDPCommHookType],
        "bucket_layout": bucket_layout(),
        "errors": {
            "start_1_with_error_feedback": error_text(
                power.PowerSGDState, None, start_powerSGD_iter=1
            ),
        },
    }
    if not ORACLE:
        got["ours_only"] = {
            "quantized": {"per_tensor": quantized(rank, None), "per_chunk_64": quantized(rank, 64)},
            "bf16": {name: simple(rank, name) for name in BF16},
            "full_rank_in_buckets": full_rank_in_buckets(rank),
        }
    dist.destroy_process_group()
    hand_back(got)


def flat(results: list[dict]) -> dict[str, np.ndarray]:
    """Every rank's values by path (``"0/power/rank1/steps/2/1"``), not its errors nor
    what only ours runs."""
    return by_path(results, skip=("errors", "ours_only"))
