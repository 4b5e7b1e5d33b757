"""Worker code for the DDP tests: one job runs every scenario and hands back what it saw.

``scenarios`` runs in 4 ranks: data parallel gradients on the shm and tcp engines at 4
ranks (the default group, a tcp group) and at 2 (groups of ranks 0 and 1), the
overlap of buckets with the backward pass, ``no_sync``, ``find_unused_parameters``
both ways, ``broadcast_buffers``, the fp16 hook, ``join`` with uneven inputs, and
DDP under distributed autograd.
"""

from __future__ import annotations

import io
import threading
import time

import numpy as np

import tensorplay_jax as tp
import tensorplay_jax.distributed as dist
from tensorplay_jax.distributed import autograd as dist_autograd
from tensorplay_jax.distributed import rpc
from tensorplay_jax.distributed.algorithms.ddp_comm_hooks import default_hooks
from tensorplay_jax.distributed.nn import RemoteModule
from tensorplay_jax.nn.parallel import DistributedDataParallel as DDP
from tests._worker import error_text, hand_back, npa, rank_and_world_size
from tests.distributed import _ddp_cases as C

TIMEOUT = 60


def _mlp() -> tp.nn.Module:
    return tp.nn.Sequential(
        tp.nn.Linear(C.D_IN, C.D_HID), tp.nn.Tanh(), tp.nn.Linear(C.D_HID, C.D_OUT)
    )


def _loss(model, x, y):
    return ((model(tp.tensor(x)) - tp.tensor(y)) ** 2).mean()


def _params(model) -> dict[str, np.ndarray]:
    return {n: npa(p) for n, p in model.named_parameters()}


def _grads(model) -> dict[str, np.ndarray | None]:
    return {n: None if p.grad is None else npa(p.grad) for n, p in model.named_parameters()}


def _equal_grads(got: dict, tag: str, group) -> None:
    """One synced backward on an MLP of rank-seeded weights: the start and the grads."""
    rank = dist.get_rank()
    tp.manual_seed(rank)  # different weights on each rank: DDP must broadcast rank 0's
    model = _mlp()
    ddp = DDP(model, process_group=group, bucket_cap_mb=0.0002, timeout=TIMEOUT)
    got[f"{tag}/buckets"] = len(ddp.reducer.buckets)
    got[f"{tag}/params"] = _params(model)
    x, y = C.batch(rank)
    _loss(ddp, x, y).backward()
    got[f"{tag}/grads"] = _grads(model)


def _overlap(got: dict) -> None:
    """Four big layers, a bucket each: when is each bucket's hook called, when is the
    first layer's weight gradient (the last one of the pass) computed, when does
    backward return."""
    tp.manual_seed(0)
    layers = [tp.nn.Linear(C.BIG, C.BIG) for _ in range(4)]
    model = tp.nn.Sequential(*[m for layer in layers for m in (layer, tp.nn.Tanh())])
    ddp = DDP(model, bucket_cap_mb=4, timeout=TIMEOUT)
    events: list[tuple[str, float]] = []
    first_hook = threading.Event()

    def hook(state, bucket):
        events.append((f"bucket{bucket.index()}", time.perf_counter()))
        if bucket.index() == 0:
            first_hook.set()
        return default_hooks.allreduce_hook(state, bucket)

    ddp.register_comm_hook(None, hook)

    def computed(t):  # the first layer's gradient is the last one computed
        t.grad.value.block_until_ready()
        # The backward pass waits here, inside its last gradient: bucket 0's hook gets to
        # run only if the bucket was launched while the pass was still going (a reducer
        # that launched buckets at the pass's end would leave this wait to time out).
        first_hook.wait(TIMEOUT)
        events.append(("layer0", time.perf_counter()))

    layers[0].weight.register_post_accumulate_grad_hook(computed)
    rs = np.random.RandomState(dist.get_rank())
    x = tp.tensor(rs.randn(C.BIG_BATCH, C.BIG).astype(np.float32))
    for _ in range(2):  # the last pass counts (the first one compiles)
        events.clear()
        first_hook.clear()
        ddp(x).sum().backward()
        events.append(("end", time.perf_counter()))
    got["overlap/events"] = list(events)
    got["overlap/buckets"] = len(ddp.reducer.buckets)


def _no_sync(got: dict) -> None:
    rank = dist.get_rank()
    model = _mlp()
    ddp = DDP(model, bucket_cap_mb=0.0002, timeout=TIMEOUT)
    got["no_sync/params"] = _params(model)
    with ddp.no_sync():
        _loss(ddp, *C.batch(rank, 1)).backward()
    got["no_sync/local"] = _grads(model)
    _loss(ddp, *C.batch(rank, 2)).backward()
    got["no_sync/synced"] = _grads(model)


class _Alternating(tp.nn.Module):
    """Rank 0 uses ``a`` then ``b`` on alternate passes; the other ranks ``c`` then ``d``."""

    def __init__(self) -> None:
        super().__init__()
        for name in "abcd":
            setattr(self, name, tp.nn.Linear(C.D_IN, C.D_OUT))
        self.second = False

    def forward(self, x):
        first, second = ("a", "b") if dist.get_rank() == 0 else ("c", "d")
        layer = getattr(self, second if self.second else first)
        self.second = not self.second
        return layer(x)


def _no_sync_unused(got: dict) -> None:
    """With find_unused_parameters, a parameter used only in a ``no_sync`` pass since the
    last sync is averaged at the next synced pass (torch's local-used map)."""
    rank = dist.get_rank()
    model = _Alternating()
    ddp = DDP(model, find_unused_parameters=True, timeout=TIMEOUT)
    with ddp.no_sync():
        _loss(ddp, *C.batch(rank, 1)).backward()
    got["no_sync_unused/local"] = _grads(model)
    _loss(ddp, *C.batch(rank, 2)).backward()
    got["no_sync_unused/synced"] = _grads(model)


class _Branches(tp.nn.Module):
    """``a`` always; ``b`` only on ranks listed in ``b_on``; ``c`` never."""

    def __init__(self, b_on: tuple[int, ...]) -> None:
        super().__init__()
        self.a = tp.nn.Linear(C.D_IN, C.D_OUT)
        self.b = tp.nn.Linear(C.D_IN, C.D_OUT)
        self.c = tp.nn.Linear(C.D_IN, C.D_OUT)
        self.b_on = b_on

    def forward(self, x):
        out = self.a(x)
        if dist.get_rank() in self.b_on:
            out = out + self.b(x)
        return out


def _unused(got: dict) -> None:
    rank = dist.get_rank()
    model = _Branches(b_on=(1,))
    ddp = DDP(model, find_unused_parameters=True, timeout=TIMEOUT)
    got["unused/params"] = _params(model)
    _loss(ddp, *C.batch(rank, 3)).backward()
    got["unused/grads"] = _grads(model)
    # without find_unused_parameters: the next synced forward raises torch's error
    plain = DDP(_Branches(b_on=(0, 1, 2, 3)), timeout=TIMEOUT)
    _loss(plain, *C.batch(rank, 3)).backward()
    got["unused/error"] = error_text(_loss, plain, *C.batch(rank, 3))


class _WithBuffer(tp.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = tp.nn.Linear(C.D_IN, C.D_OUT)
        self.register_buffer("stat", tp.zeros(3))
        self.seen: list[np.ndarray] = []

    def forward(self, x):
        self.seen.append(npa(self.stat))
        return self.lin(x)


def _buffers(got: dict) -> None:
    rank = dist.get_rank()
    for flag in (True, False):
        model = _WithBuffer()
        ddp = DDP(model, broadcast_buffers=flag, timeout=TIMEOUT)
        got[f"buffers/{flag}/after_init"] = npa(model.stat)
        tp.tensors.overwrite(model.stat, tp.full((3,), float(rank + 1)).value)
        ddp(tp.tensor(C.batch(rank)[0]))
        got[f"buffers/{flag}/in_forward"] = model.seen[-1]


def _fp16(got: dict) -> None:
    rank = dist.get_rank()
    model = _mlp()
    ddp = DDP(model, timeout=TIMEOUT)
    dtypes = []

    def hook(state, bucket):
        dtypes.append(str(bucket.buffer().dtype))
        return default_hooks.fp16_compress_hook(state, bucket)

    ddp.register_comm_hook(None, hook)
    got["fp16/params"] = _params(model)
    _loss(ddp, *C.batch(rank, 4)).backward()
    got["fp16/grads"] = _grads(model)
    got["fp16/register_twice"] = error_text(ddp.register_comm_hook, None, hook)
    got["api/state_dict"] = list(ddp.state_dict())
    got["api/module_is_the_model"] = ddp.module is model
    fresh = DDP(_mlp(), timeout=TIMEOUT)
    got["api/hook_not_callable"] = error_text(fresh.register_comm_hook, None, "allreduce")
    got["api/two_devices"] = error_text(DDP, _mlp(), device_ids=[0, 1])


def _pickled(got: dict) -> None:
    """``tp.save(ddp_model)`` / ``tp.load``: the loaded model trains as the saved one would."""
    rank = dist.get_rank()
    buf = io.BytesIO()
    tp.save(DDP(_mlp(), timeout=TIMEOUT), buf)
    buf.seek(0)
    loaded = tp.load(buf, weights_only=False)
    got["pickled/params"] = _params(loaded.module)
    _loss(loaded, *C.batch(rank)).backward()
    got["pickled/grads"] = _grads(loaded.module)
    sub = dist.new_group([0, 1])
    if rank < 2:
        on_sub = DDP(_mlp(), process_group=sub, timeout=TIMEOUT)
        got["pickled/subgroup"] = error_text(tp.save, on_sub, io.BytesIO())


def _join(got: dict) -> None:
    rank = dist.get_rank()
    model = _mlp()
    ddp = DDP(model, timeout=TIMEOUT)
    opt = tp.optim.SGD(model.parameters(), lr=C.LR)
    got["join/params"] = _params(model)
    per_step = []
    t0 = time.monotonic()
    with ddp.join():
        for step in range(C.uneven_steps(rank)):
            opt.zero_grad()
            _loss(ddp, *C.batch(rank, 10 + step)).backward()
            per_step.append(_grads(model))
            opt.step()
    got["join/seconds"] = time.monotonic() - t0
    got["join/grads"] = per_step
    got["join/final_params"] = _params(model)

    def early() -> None:  # rank 0 has one batch, the others two
        with ddp.join(throw_on_early_termination=True):
            for step in range(1 if rank == 0 else 2):
                _loss(ddp, *C.batch(rank, 10 + step)).backward()

    got["join/throw"] = error_text(early)


def _dist_autograd(got: dict) -> None:
    """DDP's gradients under ``dist_autograd.backward`` equal those of a local backward."""
    rank = dist.get_rank()
    model = _mlp()
    ddp = DDP(model, timeout=TIMEOUT)
    got["dist_autograd/params"] = _params(model)
    x, y = C.batch(rank, 20)
    with dist_autograd.context() as cid:
        dist_autograd.backward(cid, [_loss(ddp, x, y)])
        grads = dist_autograd.get_gradients(cid)
        got["dist_autograd/ctx"] = {n: npa(grads[p]) for n, p in model.named_parameters()}
    got["dist_autograd/grad_is_none"] = all(p.grad is None for p in model.parameters())
    _loss(ddp, x, y).backward()
    got["dist_autograd/local"] = _grads(model)


def _remote_weight(rref) -> np.ndarray:
    return npa(rref.local_value().weight)


def _remote_grad(rref, cid: int) -> np.ndarray:
    return npa(dist_autograd.get_gradients(cid)[rref.local_value().weight])


def _local_vs_remote(got: dict) -> None:
    """torch's test_ddp_dist_autograd_local_vs_remote: a RemoteModule on w0 feeds a DDP
    layer; the context's gradients equal a local backward through a local copy."""
    rank = dist.get_rank()
    remote1 = RemoteModule("w0/cpu", tp.nn.Linear, args=(10, 5, False))
    layer1 = tp.nn.Linear(10, 5, bias=False)
    w1 = rpc.rpc_sync("w0", _remote_weight, args=(remote1.module_rref,))
    tp.tensors.overwrite(layer1.weight, tp.tensor(w1).value)
    tp.manual_seed(rank)
    layer2 = tp.nn.Linear(5, 1)
    ddp = DDP(layer2, timeout=TIMEOUT)
    x = tp.tensor(np.random.RandomState(30 + rank).rand(10, 10).astype(np.float32))
    ddp(layer1(x)).sum().backward()
    got["remote/local"] = (npa(layer2.weight.grad), npa(layer1.weight.grad))
    with dist_autograd.context() as cid:
        dist_autograd.backward(cid, [ddp(remote1(x)).sum()])
        grads = dist_autograd.get_gradients(cid)
        dist.barrier()
        remote = rpc.rpc_sync("w0", _remote_grad, args=(remote1.module_rref, cid))
        got["remote/ctx"] = (npa(grads[layer2.weight]), remote)
    got["remote/w1"] = w1
    got["remote/layer2"] = _params(layer2)


def _seeded_linear(d_in: int, d_out: int, seed: int) -> tp.nn.Module:
    tp.manual_seed(seed)
    return tp.nn.Linear(d_in, d_out)


def _apply_remote(rref, x):
    return rref.local_value()(x)


def _remote_params(rref) -> dict[str, np.ndarray]:
    return _params(rref.local_value())


def _remote_grads(rref, cid: int) -> dict[str, np.ndarray]:
    grads = dist_autograd.get_gradients(cid)
    return {n: npa(grads[p]) for n, p in rref.local_value().named_parameters()}


class _Hybrid(tp.nn.Module):
    """torch's ddp_under_dist_autograd HybridModel, small: fc1 here, then a layer on another
    worker (not a DDP parameter), then fc2 here. fc1's gradient comes back over RPC after
    the backward pass here has reached the send: DDP must still average it."""

    def __init__(self, remote) -> None:
        super().__init__()
        self.remote = remote
        self.fc1 = tp.nn.Linear(3, 4)
        self.fc2 = tp.nn.Linear(2, 1)

    def forward(self, x):
        h = rpc.rpc_sync(self.remote.owner(), _apply_remote, args=(self.remote, self.fc1(x)))
        return self.fc2(h)


def _outside(got: dict) -> None:
    """DDP around a module whose forward goes through another worker, under
    dist_autograd.backward (torch's test_backward_ddp_outside)."""
    rank, n = dist.get_rank(), dist.get_world_size()
    remote = rpc.remote(f"w{(rank + 1) % n}", _seeded_linear, args=(4, 2, 60 + rank))
    model = _Hybrid(remote)
    ddp = DDP(model, timeout=TIMEOUT)  # rank 0's fc1 and fc2 everywhere
    x = tp.tensor(np.random.RandomState(70 + rank).rand(5, 3).astype(np.float32))
    with dist_autograd.context() as cid:
        dist_autograd.backward(cid, [ddp(x).sum()])
        grads = dist_autograd.get_gradients(cid)
        got["outside/ctx"] = {n: npa(grads[p]) for n, p in model.named_parameters()}
        dist.barrier()
        got["outside/remote_ctx"] = rpc.rpc_sync(remote.owner(), _remote_grads, args=(remote, cid))
    got["outside/params"] = _params(model)
    got["outside/remote"] = rpc.rpc_sync(remote.owner(), _remote_params, args=(remote,))


def _sparse(got: dict) -> None:
    """torch's test_ddp_dist_autograd_sparse_grads: an EmbeddingBag(sparse=True) under DDP."""
    rank = dist.get_rank()
    model = tp.nn.EmbeddingBag(10, 3, sparse=True)
    ddp = DDP(model, timeout=TIMEOUT)
    idx = tp.tensor(np.random.RandomState(40 + rank).randint(0, 10, 10))
    offsets = tp.tensor(np.array([0, 4]))
    ddp(idx, offsets).sum().backward()
    got["sparse/local"] = npa(model.weight.grad.to_dense() if model.weight.grad.is_sparse
                              else model.weight.grad)  # fmt: skip
    with dist_autograd.context() as cid:
        dist_autograd.backward(cid, [ddp(idx, offsets).sum()])
        grads = dist_autograd.get_gradients(cid)
        got["sparse/ctx_keys"] = len(grads)
        got["sparse/ctx"] = npa(grads[model.weight])


def scenarios() -> None:
    rank, n = rank_and_world_size()
    dist.init_process_group("gloo", timeout=TIMEOUT, engine="shm")
    got: dict = {}
    tcp4 = dist.new_group(engine="tcp")
    shm2 = dist.new_group([0, 1], engine="shm")
    tcp2 = dist.new_group([0, 1], engine="tcp")
    _equal_grads(got, "shm-4", None)
    _equal_grads(got, "tcp-4", tcp4)
    if rank < 2:
        _equal_grads(got, "shm-2", shm2)
        _equal_grads(got, "tcp-2", tcp2)
    _overlap(got)
    _no_sync(got)
    _no_sync_unused(got)
    _unused(got)
    _buffers(got)
    _fp16(got)
    _pickled(got)
    _join(got)
    rpc.init_rpc(f"w{rank}", rank=rank, world_size=n)
    _dist_autograd(got)
    _local_vs_remote(got)
    _outside(got)
    _sparse(got)
    rpc.shutdown()
    dist.destroy_process_group()
    hand_back(got)
