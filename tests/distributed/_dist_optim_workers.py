"""Worker code for the tests of the data-parallel optimizers, written once for both libraries.

``job``: three ranks train the same small model under ``DistributedDataParallel``, each on its
own batch, with ``ZeroRedundancyOptimizer(Adam)``: three steps, a changed learning
rate, an added param group, the consolidated state dict, a fresh optimizer that loads
it, and uneven inputs under ``Join``. Each rank hands back what it saw
(``tests._worker.hand_back``).

``post_local_job``: four ranks train with post-local SGD (DDP's ``post_localSGD_hook``
over subgroups of two ranks, ``PostLocalSGDOptimizer`` with a ``PeriodicModelAverager``),
and average parameters with ``model_averaging.utils``.

With ``TPJ_OPTIM_ORACLE=torch`` the same calls run on torch's gloo
(``golden/make_dist_optim_golden.py`` stores the values); the tests compare ours with
those, and with plain optimizers and NumPy where one computes the same thing.
"""

from __future__ import annotations

import copy
import datetime
import os
import warnings
from collections import OrderedDict

import numpy as np

from tests._torch_golden import by_path
from tests._worker import error_text, hand_back

ORACLE = os.environ.get("TPJ_OPTIM_ORACLE") == "torch"
if ORACLE:
    import torch as tp
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import post_localSGD_hook as hooks
    from torch.distributed.algorithms.join import Join
    from torch.distributed.algorithms.model_averaging import averagers
    from torch.distributed.algorithms.model_averaging import hierarchical_model_averager as hier
    from torch.distributed.algorithms.model_averaging import utils as averaging
    from torch.distributed.optim import PostLocalSGDOptimizer, ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP
else:
    import tensorplay_jax as tp
    import tensorplay_jax.distributed as dist
    from tensorplay_jax.distributed.algorithms.ddp_comm_hooks import post_localSGD_hook as hooks
    from tensorplay_jax.distributed.algorithms.join import Join
    from tensorplay_jax.distributed.algorithms.model_averaging import averagers
    from tensorplay_jax.distributed.algorithms.model_averaging import (
        hierarchical_model_averager as hier,
    )
    from tensorplay_jax.distributed.algorithms.model_averaging import utils as averaging
    from tensorplay_jax.distributed.optim import PostLocalSGDOptimizer, ZeroRedundancyOptimizer
    from tensorplay_jax.nn.parallel import DistributedDataParallel as DDP

# What a state dict's param groups hold on both libraries (torch's Adam adds more keys).
HYPER = ("lr", "betas", "eps", "weight_decay", "amsgrad")


def init(i: int, shape: tuple[int, ...]) -> np.ndarray:
    """Parameter ``i``'s starting value."""
    n = int(np.prod(shape))
    return (np.sin(np.arange(n) * 0.7 + i) * 0.5).reshape(shape).astype(np.float32)


def batch(rank: int, step: int) -> tuple[np.ndarray, np.ndarray]:
    """Rank ``rank``'s inputs and targets at ``step``."""
    x = np.cos(np.arange(4 * 5) * 0.3 + 10 * rank + step).reshape(4, 5).astype(np.float32)
    y = np.sin(np.arange(4 * 3) * 0.2 - rank - 2 * step).reshape(4, 3).astype(np.float32)
    return x, y


def model() -> tp.nn.Module:
    """Linear(5, 7), Tanh, Linear(7, 3): parameters of 35, 7, 21 and 3 elements."""
    m = tp.nn.Sequential(tp.nn.Linear(5, 7), tp.nn.Tanh(), tp.nn.Linear(7, 3))
    with tp.no_grad():
        for i, p in enumerate(m.parameters()):
            p.copy_(tp.tensor(init(i, tuple(p.shape))))
    return m


def _values(params) -> list[np.ndarray]:
    return [p.detach().numpy().copy() for p in params]


def _backward(ddp, rank: int, step: int, extra=None) -> None:
    x, y = batch(rank, step)
    loss = ((ddp(tp.tensor(x)) - tp.tensor(y)) ** 2).mean()
    if extra is not None:  # the same gradient on every rank: not averaged by DDP
        loss = loss + (extra * extra).sum()
    loss.backward()


def _steps(ddp, opt, rank: int, n: int) -> list[list[np.ndarray]]:
    """``n`` steps of ``opt`` on this rank's batches; the parameters after each."""
    steps = []
    for step in range(n):
        opt.zero_grad()
        _backward(ddp, rank, step)
        opt.step()
        steps.append(_values(ddp.parameters()))
    return steps


def _state_dict(sd: dict) -> dict:
    """A whole state dict as plain values: each parameter's state, each group's settings."""
    state = {
        str(i): {k: np.array(v.detach().numpy()) for k, v in s.items()}
        for i, s in sd["state"].items()
    }
    groups = [
        {**{k: np.asarray(g[k]) for k in HYPER}, "params": np.asarray(g["params"])}
        for g in sd["param_groups"]
    ]
    return {"state": state, "param_groups": groups}


def _partition(zero, params) -> list[list[list[int]]]:
    index = {id(p): i for i, p in enumerate(params)}
    return [
        [[index[id(p)] for p in g["params"]] for g in groups]
        for groups in zero._partition_parameters()
    ]


def train(rank: int, bucket: bool) -> dict:
    """The whole run with ZeRO; what this rank saw."""
    ddp = DDP(model())
    params = list(ddp.parameters())
    zero = ZeroRedundancyOptimizer(
        params, optimizer_class=tp.optim.Adam, parameters_as_bucket_view=bucket, lr=0.05
    )
    got: dict = {"partition": _partition(zero, params), "steps": _steps(ddp, zero, rank, 3)}
    got["local_states"] = len(zero.optim.state)
    zero.param_groups[0]["lr"] = 0.01  # as a scheduler sets it
    zero.zero_grad()
    _backward(ddp, rank, 3)
    zero.step()
    got["after_lr"] = _values(params)
    got["local_lr"] = zero.optim.param_groups[0]["lr"]
    extra = tp.nn.Parameter(tp.tensor(init(9, (4,))))
    zero.add_param_group({"params": [extra], "lr": 0.1})
    zero.zero_grad()
    extra.grad = None
    _backward(ddp, rank, 4, extra)
    zero.step()
    got["added"] = _values([*params, extra])
    got["partition_added"] = _partition(zero, [*params, extra])
    zero.consolidate_state_dict(to=1)
    if rank == 1:
        got["state_dict"] = _state_dict(zero.state_dict())
    # A fresh optimizer loads the whole state (from rank 1) and takes the next step as
    # the original does. A copy: torch's state dict on CPU holds the live state Tensors.
    sd = [copy.deepcopy(zero.state_dict()) if rank == 1 else None]
    dist.broadcast_object_list(sd, src=1)
    ddp2 = DDP(model())
    params2 = list(ddp2.parameters())
    extra2 = tp.nn.Parameter(tp.tensor(init(9, (4,))))
    with tp.no_grad():
        for p2, p in zip([*params2, extra2], [*params, extra], strict=True):
            p2.copy_(p.detach())
    zero2 = ZeroRedundancyOptimizer(
        params2, optimizer_class=tp.optim.Adam, parameters_as_bucket_view=bucket, lr=0.05
    )
    zero2.add_param_group({"params": [extra2], "lr": 0.1})
    zero2.load_state_dict(sd[0])
    for z, d, e in ((zero, ddp, extra), (zero2, ddp2, extra2)):
        z.zero_grad()
        _backward(d, rank, 5, e)
        z.step()
    got["original_next"] = _values([*params, extra])
    got["loaded_next"] = _values([*params2, extra2])
    got["loaded_lr"] = [g["lr"] for g in zero2.optim.param_groups]
    return got


def uneven(rank: int) -> list[np.ndarray]:
    """Rank r has 2 + r batches, under ``Join([ddp, zero])``; the final values."""
    ddp = DDP(model())
    zero = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=tp.optim.Adam, lr=0.05)
    with Join([ddp, zero]):
        for step in range(2 + rank):
            zero.zero_grad()
            _backward(ddp, rank, step)
            zero.step()
    return _values(ddp.parameters())


def plain(rank: int) -> list[list[np.ndarray]]:
    """The first three steps with a plain Adam (every parameter's state on every rank)."""
    ddp = DDP(model())
    return _steps(ddp, tp.optim.Adam(ddp.parameters(), lr=0.05), rank, 3)


def errors(rank: int) -> dict:
    """What bad arguments raise (the same calls on every rank)."""
    adam = tp.optim.Adam
    w = tp.nn.Parameter(tp.tensor(init(0, (3,))))
    half = tp.nn.Parameter(tp.tensor(init(1, (3,))).half())
    zero = ZeroRedundancyOptimizer([w], optimizer_class=adam, lr=0.1)
    zero.consolidate_state_dict(to=0)
    out = {
        "tensor": error_text(ZeroRedundancyOptimizer, w, optimizer_class=adam, lr=0.1),
        "empty": error_text(ZeroRedundancyOptimizer, [], optimizer_class=adam, lr=0.1),
        "mixed": error_text(ZeroRedundancyOptimizer, [w, half], optimizer_class=adam, lr=0.1),
        "not_consolidated": error_text(zero.state_dict) if rank != 0 else None,
        "group_without_params": error_text(
            ZeroRedundancyOptimizer, [{"lr": 0.1}], optimizer_class=adam, lr=0.1
        ),
    }
    if not ORACLE:
        out["overlap"] = error_text(
            ZeroRedundancyOptimizer, [w], optimizer_class=adam, overlap_with_ddp=True, lr=0.1
        )
        out["bad_to"] = error_text(zero.consolidate_state_dict, to=3)
    return out


def job() -> None:
    if ORACLE:
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    else:
        dist.init_process_group("gloo", timeout=60)
    rank = dist.get_rank()
    got = {
        "per_param": train(rank, bucket=False),
        "bucket": train(rank, bucket=True),
        "uneven": uneven(rank),
        "plain": plain(rank),
        "errors": errors(rank),
    }
    dist.destroy_process_group()
    hand_back(got)


def train_post_local(rank: int, sub, allreduce_after: bool) -> dict:
    """Six steps of post-local SGD: two warm-up steps averaged across the four ranks, then
    gradients averaged within ``sub`` (or not at all) and the parameters across the
    four ranks every second step."""
    ddp = DDP(model())
    state = hooks.PostLocalSGDState(
        process_group=None,
        subgroup=sub,
        start_localSGD_iter=2,
        post_local_gradient_allreduce=allreduce_after,
    )
    ddp.register_comm_hook(state, hooks.post_localSGD_hook)
    opt = PostLocalSGDOptimizer(
        optim=tp.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9),
        averager=averagers.PeriodicModelAverager(period=2, warmup_steps=2),
    )
    steps = _steps(ddp, opt, rank, 6)
    return {"steps": steps, "iter": state.iter, "averager_step": opt.state_dict()["step"]}


def hierarchical(rank: int) -> list[list[np.ndarray]]:
    """Five local SGD steps (no DDP), averaged after each by pairs every second step and
    by all four ranks every fourth, after one warm-up step."""
    m = model()
    opt = tp.optim.SGD(m.parameters(), lr=0.1)
    averager = hier.HierarchicalModelAverager(
        period_group_size_dict=OrderedDict([(2, 2), (4, 4)]), warmup_steps=1
    )
    steps = []
    for step in range(5):
        opt.zero_grad()
        x, y = batch(rank, step)
        ((m(tp.tensor(x)) - tp.tensor(y)) ** 2).mean().backward()
        opt.step()
        averager.average_parameters(m.parameters())
        steps.append(_values(m.parameters()))
    return steps


def _warned(fn, *args, **kwargs) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn(*args, **kwargs)
    return [f"{w.category.__name__}: {w.message}" for w in caught]


def post_local_job() -> None:
    if ORACLE:
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    else:
        dist.init_process_group("gloo", timeout=60)
    rank = dist.get_rank()
    sub, _ = dist.new_subgroups(group_size=2)  # ranks {0, 1} and {2, 3}
    got: dict = {
        "subgroup_allreduce": train_post_local(rank, sub, True),
        "no_allreduce_after": train_post_local(rank, sub, False),
        "hierarchical": hierarchical(rank),
    }
    # average_parameters: the mean of every rank's values; one without a gradient is kept
    w = tp.nn.Parameter(tp.tensor(init(rank, (3, 2))))
    b = tp.nn.Parameter(tp.tensor(init(10 + rank, (2,))))
    (w * 2).sum().backward()
    averaging.average_parameters_or_parameter_groups([{"params": [w, b]}], None)
    got["averaged"], got["kept"] = _values([w, b])
    opt = PostLocalSGDOptimizer(
        optim=tp.optim.SGD([w], lr=0.1), averager=averagers.PeriodicModelAverager(period=2)
    )
    sd = opt.state_dict()
    del sd["step"]
    got["warnings"] = {
        "period_1": _warned(averagers.PeriodicModelAverager, period=1),
        "load_without_step": _warned(opt.load_state_dict, sd),
        "hierarchical_period_1": _warned(hier.HierarchicalModelAverager, OrderedDict([(1, 4)])),
    }
    got["errors"] = {
        "period_0": error_text(averagers.PeriodicModelAverager, period=0),
        "negative_warmup": error_text(averagers.PeriodicModelAverager, 2, warmup_steps=-1),
        "not_params": error_text(averaging.get_params_to_average, [3]),
        "hierarchical_empty": error_text(hier.HierarchicalModelAverager, OrderedDict()),
        "hierarchical_period_0": error_text(hier.HierarchicalModelAverager, {0: 4}),
        "hierarchical_not_the_group": error_text(hier.HierarchicalModelAverager, {2: 2}),
    }
    dist.destroy_process_group()
    hand_back(got)


def flat(results: list[dict]) -> dict[str, np.ndarray]:
    """Every rank's values by path (``"0/per_param/steps/2/1"``), not its errors: what the
    golden file holds of torch's run, and what ours is compared with."""
    return by_path(results, skip=("errors", "warnings"))
