"""``DistributedDataParallel``: data parallel training of a module over a process group."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

import tensorplay_jax.process_group as dist
from tensorplay_jax.autograd import is_grad_enabled
from tensorplay_jax.distributed.algorithms.join import Join, Joinable, JoinHook
from tensorplay_jax.distributed.parallel._bucket import FIRST_BUCKET_BYTES
from tensorplay_jax.distributed.parallel._reducer import CommHook, Reducer
from tensorplay_jax.nn import Module
from tensorplay_jax.runtime.settings import DEFAULT_PG_TIMEOUT_S
from tensorplay_jax.tensors import Tensor, overwrite

__all__ = ["DistributedDataParallel"]

_MB = 1024 * 1024
DEFAULT_BUCKET_CAP_MB = 25  # torch's default bucket_cap_mb


def _tensors(out: Any) -> list[Tensor]:
    """The Tensors in a forward's output (nested tuples, lists and dicts)."""
    if isinstance(out, Tensor):
        return [out]
    if isinstance(out, list | tuple):
        return [t for o in out for t in _tensors(o)]
    if isinstance(out, dict):
        return [t for o in out.values() for t in _tensors(o)]
    return []


def _sync_states(tensors: Sequence[Tensor], src: int, group: Any) -> None:
    """Every rank's ``tensors`` take ``src``'s values: one broadcast per dtype."""
    by_dtype: dict[np.dtype, list[Tensor]] = {}
    for t in tensors:
        by_dtype.setdefault(np.dtype(t.dtype), []).append(t)
    for dtype, ts in by_dtype.items():
        flat = jnp.concatenate([jnp.ravel(t.value) for t in ts]) if ts else None
        got = jnp.asarray(dist.broadcast(flat, src=src, group=group))
        offset = 0
        for t in ts:
            n = math.prod(t.shape)
            overwrite(t, got[offset : offset + n].reshape(t.shape).astype(dtype))
            offset += n


class _DDPJoinHook(JoinHook):
    """A joined rank shadows the buffer broadcast and bucket all-reduces of the others."""

    def __init__(self, ddp: DistributedDataParallel, divide_by_initial_world_size: bool) -> None:
        self._ddp = ddp
        ddp._divide_by_initial = divide_by_initial_world_size

    def main_hook(self) -> None:
        join = Join.current()
        assert join is not None and join.flags is not None
        self._ddp._shadow(join.flags)

    def post_hook(self, is_last_joiner: bool) -> None:
        self._ddp._sync_final_model(is_last_joiner)


class DistributedDataParallel(Module, Joinable):
    """Data parallel training: each rank runs ``module`` on its own batch, gradients are
    averaged across the process group during the backward pass (tensorplay's
    ``torch.nn.parallel.DistributedDataParallel``).

    The constructor broadcasts rank 0's parameters and buffers. Gradients are
    all-reduced in buckets of about ``bucket_cap_mb`` (parameters in reverse order); a
    bucket's all-reduce starts, on a communication thread, as soon as its last
    gradient is accumulated, while the backward pass goes on, and the end of the pass
    waits for every bucket (with a timeout) and writes the averaged gradients into
    ``param.grad`` (or, under ``dist_autograd.backward``, into the context's gradients).

    Args:
        module: the module to replicate (the same on every rank).
        device_ids: None, or one device (accepted for torch's call; the module's
            parameters stay where they are).
        output_device: accepted for torch's call; outputs stay where ``module`` puts them.
        dim: accepted for torch's call (no scattering of inputs here).
        broadcast_buffers: broadcast the buffers from the authoritative rank (group
            rank 0) at each forward.
        init_sync: broadcast rank 0's parameters and buffers in the constructor.
        process_group: the group (None: the default group).
        bucket_cap_mb: the bucket size cap in MiB (default 25, with a first bucket of 1
            MiB; a cap given here holds for the first bucket too, as torch 2.13's).
        find_unused_parameters: walk the forward's output graph and mark parameters it
            does not reach ready with zero gradient, so the reduction completes.
        check_reduction: ignored, as in torch.
        gradient_as_bucket_view: accepted; gradients are new arrays here (JAX arrays
            are immutable, so no view can alias a bucket).
        static_graph: the set of used parameters is the same every iteration; handled
            as ``find_unused_parameters=True``.
        timeout: seconds the end of a backward pass waits for each bucket (default:
            the process-group default timeout).

    Raises:
        RuntimeError: no parameter of ``module`` requires grad, the process group is
            not initialized, or the model differs across ranks.
        ValueError: more than one device in ``device_ids``.

    Example (every rank)::

        dist.init_process_group("gloo")
        model = DistributedDataParallel(tp.nn.Linear(4, 2))
        model(tp.randn(8, 4)).sum().backward()  # p.grad: the average over the ranks
    """

    def __init__(
        self,
        module: Module,
        device_ids: Sequence[Any] | None = None,
        output_device: Any = None,
        dim: int = 0,
        broadcast_buffers: bool = True,
        init_sync: bool = True,
        process_group: Any = None,
        bucket_cap_mb: float | None = None,
        find_unused_parameters: bool = False,
        check_reduction: bool = False,
        gradient_as_bucket_view: bool = False,
        static_graph: bool = False,
        *,
        timeout: float | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(module, Module):
            raise TypeError(
                f"DistributedDataParallel: module must be a tensorplay_jax.nn.Module, got "
                f"{type(module).__name__}"
            )
        if device_ids is not None and len(device_ids) > 1:
            raise ValueError(
                f"DistributedDataParallel: device_ids={list(device_ids)} names more than one "
                "device; run one process per device with device_ids=[its device] or None"
            )
        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        if not named:
            raise RuntimeError(
                "DistributedDataParallel is not needed when a module doesn't have any "
                "parameter that requires a gradient."
            )
        if not dist.is_initialized():
            raise RuntimeError(
                "DistributedDataParallel: the default process group has not been initialized; "
                "call tensorplay_jax.distributed.init_process_group(...) first"
            )
        self.module = module
        self.device_ids = list(device_ids) if device_ids is not None else None
        self.output_device = output_device
        self.dim = dim
        self.process_group = process_group
        self.broadcast_buffers = broadcast_buffers
        self.find_unused_parameters = find_unused_parameters
        self.gradient_as_bucket_view = gradient_as_bucket_view
        self.static_graph = static_graph
        self.require_backward_grad_sync = True
        self.require_forward_param_sync = True
        cap = DEFAULT_BUCKET_CAP_MB if bucket_cap_mb is None else bucket_cap_mb
        self.bucket_bytes_cap = int(cap * _MB)
        self._first_bucket_bytes_cap = (
            FIRST_BUCKET_BYTES if bucket_cap_mb is None else self.bucket_bytes_cap
        )
        self._divide_by_initial = True
        self._group_ranks = dist.get_process_group_ranks(process_group)
        self._check_same_model(named)
        if init_sync:
            _sync_states(self._states(), self._group_ranks[0], process_group)
        self._timeout_s = DEFAULT_PG_TIMEOUT_S if timeout is None else float(timeout)
        self.reducer = self._new_reducer()
        self._comm_hook_set = False

    def _new_reducer(self) -> Reducer:
        named = [(n, p) for n, p in self.module.named_parameters() if p.requires_grad]
        return Reducer(
            [p for _, p in named],
            [n for n, _ in named],
            self.process_group,
            self.bucket_bytes_cap,
            self._first_bucket_bytes_cap,
            self.find_unused_parameters or self.static_graph,
            self._timeout_s,
        )

    # ------------------------------------------------------------------ pickling
    def __getstate__(self) -> dict[str, Any]:
        """The module and options, without the reducer (``torch.save(ddp_model, f)``); only
        for DDP on the default group, as tensorplay's."""
        if self.process_group is not None and self.process_group is not dist.group.WORLD:
            raise RuntimeError(
                "DDP Pickling/Unpickling are only supported when using DDP with the default "
                "process group. That is, when you have called init_process_group and have "
                "not passed process_group argument to DDP constructor"
            )
        state = dict(self.__dict__)
        del state["reducer"]
        state["_comm_hook_set"] = False  # a communication hook is not saved
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Loaded in a process of the job: the reducer is made anew on the default group."""
        self.__dict__.update(state)
        self.process_group = None
        self.reducer = self._new_reducer()

    # ------------------------------------------------------------------ set-up
    def _states(self) -> list[Tensor]:
        return [*self.module.parameters(), *self.module.buffers()]

    def _check_same_model(self, named: list[tuple[str, Tensor]]) -> None:
        numel = sum(math.prod(p.shape) for _, p in named)
        mine = np.array([len(named), numel % (2**31 - 1)], np.int32)
        every = np.asarray(dist.all_gather(mine, group=self.process_group))
        bad = [r for r in range(len(every)) if (every[r] != every[0]).any()]
        if bad:
            r = bad[0]
            raise RuntimeError(
                f"DDP expects same model across all ranks, but Rank {self._group_ranks[r]} "
                f"has {every[r][0]} params ({every[r][1]} elements), while rank "
                f"{self._group_ranks[0]} has {every[0][0]} params ({every[0][1]} elements); "
                "build the same module on every rank"
            )

    # ------------------------------------------------------------------ forward
    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        """Run ``module`` and prepare the next backward pass to average the gradients."""
        sync = is_grad_enabled() and self.require_backward_grad_sync
        if sync:
            self.reducer.check_prior_finished()
        flags = Join.notify_join_context(self, sync=sync)
        src = self._group_ranks[0]
        if flags is not None:
            active = np.flatnonzero(flags[:, 0])
            src = self._group_ranks[int(active.max())]
            if not self._divide_by_initial:
                self.reducer.div = len(active)
        if self.broadcast_buffers and self.require_forward_param_sync:
            self._sync_buffers(src)
        out = self.module(*inputs, **kwargs)
        if sync:
            self.reducer.prepare(_tensors(out))
        else:
            self.reducer.skip()
        return out

    def _sync_buffers(self, src: int) -> None:
        buffers = list(self.module.buffers())
        if buffers and len(self._group_ranks) > 1:
            _sync_states(buffers, src, self.process_group)

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Within it, forwards and backwards accumulate gradients locally; the first
        synced backward after it averages the sums.

        Example::

            with ddp.no_sync():
                ddp(x1).sum().backward()  # local only
            ddp(x2).sum().backward()  # averages the grads of x1 and x2
        """
        old = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = old

    # ------------------------------------------------------------------ hooks
    def register_comm_hook(self, state: Any, hook: CommHook) -> None:
        """Reduce each bucket with ``hook(state, bucket) -> Future`` of the reduced flat
        buffer (see ``distributed.algorithms.ddp_comm_hooks.default_hooks``); called once.

        Raises:
            TypeError: ``hook`` is not callable.
            RuntimeError: a hook was registered before.
        """
        if not callable(hook):
            raise TypeError("Communication hook must be callable.")
        if self._comm_hook_set:
            raise RuntimeError(
                "register_comm_hook or register_builtin_comm_hook can only be called once."
            )
        self._comm_hook_set = True
        self.reducer.comm_state = state
        self.reducer.comm_hook = hook

    # ------------------------------------------------------------------ join
    def join(
        self,
        divide_by_initial_world_size: bool = True,
        enable: bool = True,
        throw_on_early_termination: bool = False,
    ) -> Join:
        """A context manager for uneven inputs across ranks (see ``algorithms.Join``).

        Args:
            divide_by_initial_world_size: average over every rank (joined ones
                contribute zeros) rather than over the ranks still active.
            enable: False makes it a no-op.
            throw_on_early_termination: raise on every rank once one runs out of inputs.
        """
        return Join(
            [self],
            enable,
            throw_on_early_termination,
            divide_by_initial_world_size=divide_by_initial_world_size,
        )

    def join_hook(self, **kwargs: Any) -> JoinHook:
        """The hook a joined rank runs for this module (``Join``)."""
        return _DDPJoinHook(self, kwargs.get("divide_by_initial_world_size", True))

    @property
    def join_process_group(self) -> Any:
        """The process group of the join collectives."""
        return self.process_group

    def _shadow(self, flags: np.ndarray) -> None:
        active = np.flatnonzero(flags[:, 0])
        if self.broadcast_buffers and self.require_forward_param_sync:
            self._sync_buffers(self._group_ranks[int(active.max())])
        if flags[:, 1].any():
            self.reducer.shadow_backward()

    def _sync_final_model(self, is_last_joiner: bool) -> None:
        me = self._group_ranks.index(dist.get_rank())
        mine = np.int32(me if is_last_joiner else -1)
        src = int(np.asarray(dist.all_reduce(mine, op="max", group=self.process_group)))
        _sync_states(self._states(), self._group_ranks[src], self.process_group)

    def __repr__(self) -> str:
        return f"DistributedDataParallel(\n  (module): {self.module!r}\n)"
