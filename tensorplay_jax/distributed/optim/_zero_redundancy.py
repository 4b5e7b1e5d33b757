"""``ZeroRedundancyOptimizer``: each rank keeps the optimizer state of its share of the parameters.

tensorplay's ``torch.distributed.optim.ZeroRedundancyOptimizer`` (ZeRO stage 1). Every
rank holds the whole model, as with ``DistributedDataParallel``, but the optimizer
state (Adam's two moments, a momentum buffer) of only the parameters assigned to it.
The assignment is torch's sorted-greedy one, the same on every rank: within each
param group, parameters from the largest to the smallest, each to the rank whose
share has the fewest elements so far (the first such rank on a tie). A step runs the
local optimizer (``optimizer_class`` over this rank's share) and then broadcasts each
share from its rank, so every replica ends the step with the same values.

``parameters_as_bucket_view=True`` sends each rank's trainable parameters as one flat
array (one broadcast per rank instead of one per parameter); the parameters stay
arrays of their own (JAX arrays cannot be views into a bucket). Both ways give the
same values; the per-parameter way is the reference.

Example (a runnable job: ``python -m tensorplay_jax.run --nproc 2 script.py``)::

    dist.init_process_group("gloo")
    model = DDP(tp.nn.Linear(8, 2))
    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=tp.optim.Adam, lr=0.01)
    model(x).sum().backward()
    opt.step()                      # Adam's state of about half the elements per rank
    opt.consolidate_state_dict(to=0)
    if dist.get_rank() == 0:
        torch_style = opt.state_dict()
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Iterable
from itertools import chain
from typing import Any

import jax.numpy as jnp
import numpy as np

import tensorplay_jax.process_group as dist
from tensorplay_jax.distributed.algorithms.join import Join, Joinable, JoinHook
from tensorplay_jax.optim import Optimizer
from tensorplay_jax.runtime import flat as flat_buffer
from tensorplay_jax.tensors import Tensor

__all__ = ["ZeroRedundancyOptimizer"]

logger = logging.getLogger(__name__)

_NAME = "ZeroRedundancyOptimizer"


def _params_of(params: Any) -> tuple[list[Any], list[Tensor]]:
    """``params`` as a list (Tensors or param-group dicts) and every parameter in it.

    Raises:
      TypeError: a Tensor, not an iterable, or a mix of Tensors and dicts.
      ValueError: empty, or a group without ``"params"``.
    """
    if isinstance(params, Tensor):
        raise TypeError(
            f"`params` argument should be an iterable of Tensors, but got {type(params).__name__}"
        )
    try:
        items = list(params)
    except TypeError as e:
        raise TypeError(
            "`params` argument should be an iterable of Tensors or dicts, but got "
            f"{type(params).__name__}"
        ) from e
    if not items:
        raise ValueError(f"{_NAME} got an empty parameter list")
    if all(isinstance(p, Tensor) for p in items):
        return items, list(items)
    if not all(isinstance(p, dict) for p in items):
        raise TypeError("`params` argument should be an iterable of Tensors or dicts")
    if any("params" not in g for g in items):
        raise ValueError(
            "Each parameter group passed-in via `params` must have a 'params' key mapping to "
            "the parameters in the group"
        )
    return items, [p for g in items for p in _listed(g["params"])]


def _listed(params: Any) -> list[Tensor]:
    return [params] if isinstance(params, Tensor) else list(params)


def _same_dense_type(params: list[Tensor]) -> None:
    """Raises ValueError unless every parameter is dense and of one dtype (torch's rule)."""
    first = params[0]
    if first.is_sparse:
        raise ValueError(
            f"{_NAME} only supports using the same dense type for all parameters but got a "
            "sparse Tensor"
        )
    for p in params[1:]:
        if p.dtype != first.dtype or p.is_sparse:
            raise ValueError(
                f"{_NAME} only supports using the same dense type for all parameters but got "
                f"both {first.dtype} and {'sparse ' if p.is_sparse else ''}{p.dtype}"
            )


def greedy_partition(sizes: list[int], world_size: int, loads: list[int]) -> list[int]:
    """The rank each of ``sizes`` goes to: largest first, each to the least-loaded rank
    (the lowest such rank on a tie); ``loads`` (elements per rank so far) is updated.

    Example:
      >>> loads = [0, 0]
      >>> greedy_partition([1, 6, 4, 3], 2, loads), loads
      ([0, 0, 1, 1], [7, 7])
    """
    ranks = [0] * len(sizes)
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):  # stable: ties keep order
        r = min(range(world_size), key=lambda k: loads[k])
        ranks[i] = r
        loads[r] += sizes[i]
    return ranks


def _portable(state_dict: dict[str, Any]) -> dict[str, Any]:
    """A local optimizer's state dict with NumPy arrays for Tensors, to send as an object."""
    state = {
        i: {k: np.asarray(v.value) if isinstance(v, Tensor) else v for k, v in s.items()}
        for i, s in state_dict["state"].items()
    }
    return {"state": state, "param_groups": state_dict["param_groups"]}


def _tensors(state: dict[str, Any]) -> dict[str, Any]:
    return {k: Tensor(jnp.asarray(v)) if isinstance(v, np.ndarray) else v for k, v in state.items()}


class _ZeroJoinHook(JoinHook):
    """On a rank that ran out of inputs, take part in the others' steps (their broadcasts)."""

    def __init__(self, zero: ZeroRedundancyOptimizer) -> None:
        self.zero = zero

    def main_hook(self) -> None:
        self.zero.step()


class ZeroRedundancyOptimizer(Optimizer, Joinable):
    """Wrap an optimizer class so that each rank keeps the state of its share of the parameters.

    Args:
      params: the parameters (Tensors) or param groups (dicts), the same on every rank.
      optimizer_class: the local optimizer's class (``tp.optim.Adam``, ...), built on
        this rank's share with ``defaults``.
      process_group: the group whose ranks share the parameters (default: every process).
      parameters_as_bucket_view: send each rank's trainable parameters as one flat array.
      overlap_with_ddp: not supported (raises ``NotImplementedError``): the step runs
        after ``backward()``.
      **defaults: the local optimizer's hyper-parameters (``lr=...``).

    Attributes:
      optim: the local optimizer (this rank's share).
      world_size, rank, global_rank: the group's size and this process's ranks.

    Raises:
      TypeError: ``params`` is a Tensor, not an iterable, or mixes Tensors and dicts.
      ValueError: no parameters, or parameters of different dtypes or sparse ones.
      RuntimeError: this process is not a member of ``process_group``.

    Every rank must call the constructor, ``step``, ``add_param_group`` and
    ``consolidate_state_dict`` alike: each runs collectives of the group.
    """

    def __init__(
        self,
        params: Iterable[Any],
        optimizer_class: Callable[..., Optimizer],
        process_group: dist.ProcessGroup | None = None,
        parameters_as_bucket_view: bool = False,
        overlap_with_ddp: bool = False,
        **defaults: Any,
    ) -> None:
        if overlap_with_ddp:
            raise NotImplementedError(
                f"{_NAME}(overlap_with_ddp=True) needs DDP's ZeRO communication hooks "
                "(ddp_zero_hook), which tensorplay_jax does not have: construct it with "
                "overlap_with_ddp=False and call step() after backward()"
            )
        items, self._all_params = _params_of(params)
        _same_dense_type(self._all_params)
        self.initialized = False
        self._partition: list[list[dict[str, Any]]] = []
        Optimizer.__init__(self, items, defaults)
        self.process_group = dist.group.WORLD if process_group is None else process_group
        self.world_size = dist.get_world_size(self.process_group)
        self.rank = dist.get_rank(self.process_group)
        if self.rank < 0:
            raise RuntimeError(
                f"{_NAME}: this process is not a member of the process_group it was given"
            )
        self.global_rank = dist.get_global_rank(self.process_group, self.rank)
        self.parameters_as_bucket_view = parameters_as_bucket_view
        self._default_device = self._all_params[0].device
        self._is_trainable_mask = self._trainable_mask()
        self._all_state_dicts: list[dict[str, Any]] = []
        self.optim: Optimizer = optimizer_class(self._partition_parameters()[self.rank], **defaults)
        self._sync_param_groups(self.optim.param_groups, self.param_groups)
        self.initialized = True

    # ----------------------------------------------------------------- the partition
    def _partition_parameters(self) -> list[list[dict[str, Any]]]:
        """Each rank's param groups (copies of ``param_groups`` holding its share), made
        once (again after ``add_param_group``)."""
        if not self._partition:
            parts: list[list[dict[str, Any]]] = [[] for _ in range(self.world_size)]
            loads = [0] * self.world_size
            for group in self.param_groups:
                ranks = greedy_partition(
                    [p.numel() for p in group["params"]], self.world_size, loads
                )
                order = sorted(range(len(ranks)), key=lambda i: -group["params"][i].numel())
                for r in range(self.world_size):
                    share = copy.copy(group)
                    share["params"] = [group["params"][i] for i in order if ranks[i] == r]
                    parts[r].append(share)
            self._partition = parts
        return self._partition

    def _index(self) -> dict[int, int]:
        """``id(param)`` to its index in the global state dict (across groups, in order)."""
        return {
            id(p): i
            for i, p in enumerate(chain.from_iterable(g["params"] for g in self.param_groups))
        }

    def _trainable_mask(self) -> list[bool]:
        return [p.requires_grad for p in self._all_params]

    # ----------------------------------------------------------------- groups
    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a param group on every rank; its parameters are shared out as the others were.

        The earlier groups keep their ranks, so the local optimizer only gains this
        rank's share of the new group. Every rank must call it alike.
        """
        Optimizer.add_param_group(self, param_group)
        if not self.initialized:
            return
        self._all_params.extend(self.param_groups[-1]["params"])
        self._partition = []
        mine = self._partition_parameters()[self.rank]
        if len(mine) == len(self.optim.param_groups) + 1:
            self.optim.add_param_group(mine[-1])
        self._is_trainable_mask = self._trainable_mask()

    @staticmethod
    def _sync_param_groups(src: list[dict[str, Any]], dst: list[dict[str, Any]]) -> None:
        """Copy the hyper-parameters (every key but ``params``) of ``src``'s groups to ``dst``'s."""
        for s, d in zip(src, dst, strict=True):
            d.update({k: v for k, v in s.items() if k != "params"})

    # ----------------------------------------------------------------- the step
    def step(self, closure: Callable[[], Any] | None = None, **kwargs: Any) -> Any:
        """Step this rank's share with the local optimizer, then broadcast every share.

        Args:
          closure: re-evaluates the model and returns the loss (passed to the local
            optimizer's ``step``).

        Returns:
          What the local optimizer's step returned (``closure()``'s loss, or None).
        """
        Join.notify_join_context(self)
        mask = self._trainable_mask()
        if mask != self._is_trainable_mask:  # a flat array holds the trainable ones only
            logger.warning("%s detected that the trainable parameters changed", _NAME)
            self._is_trainable_mask = mask
        self._sync_param_groups(self.param_groups, self.optim.param_groups)
        loss = (
            self.optim.step(closure, **kwargs) if closure is not None else self.optim.step(**kwargs)
        )
        self._sync_param_groups(self.optim.param_groups, self.param_groups)
        self._sync_params()
        return loss

    def _sync_params(self) -> None:
        """Every rank's share from that rank: per parameter, or one flat array per rank.
        The owner's values are already its step's; the others write what arrives."""
        for r, groups in enumerate(self._partition_parameters()):
            src = dist.get_global_rank(self.process_group, r)
            params = [p for g in groups for p in g["params"]]
            if self.parameters_as_bucket_view:
                params = [p for p in params if p.requires_grad]
                values = self._broadcast_bucket(params, src)
            else:
                values = [dist.broadcast(p.value, src, group=self.process_group) for p in params]
            if r != self.rank:
                for p, v in zip(params, values, strict=True):
                    p.data = jnp.asarray(v, p.dtype)

    def _broadcast_bucket(self, params: list[Tensor], src: int) -> list[Any]:
        """``params``' values from ``src`` in one broadcast of their concatenation."""
        if not params:
            return []
        buf = flat_buffer.flatten([p.value for p in params], params[0].dtype)
        buf = dist.broadcast(buf, src, group=self.process_group)
        return flat_buffer.split(buf, [p.shape for p in params])

    # ----------------------------------------------------------------- state dicts
    def consolidate_state_dict(self, to: int = 0) -> None:
        """Gather every rank's local state on group rank ``to`` (every rank calls it);
        then ``state_dict()`` works there.

        Raises:
          ValueError: ``to`` is not a rank of the group.
        """
        if not isinstance(to, int) or not 0 <= to < self.world_size:
            raise ValueError(
                f"{_NAME}.consolidate_state_dict: to={to!r} is not a rank of the group "
                f"(0..{self.world_size - 1})"
            )
        self._sync_param_groups(self.param_groups, self.optim.param_groups)
        gathered: list[Any] | None = [None] * self.world_size if self.rank == to else None
        dist.gather_object(
            _portable(self.optim.state_dict()), gathered, group=self.process_group, group_dst=to
        )
        self._all_state_dicts = list(gathered) if gathered is not None else []

    def state_dict(self) -> dict[str, Any]:
        """The whole optimizer state in torch's layout, as of the last ``consolidate_state_dict``.

        Raises:
          RuntimeError: the state was not consolidated on this rank.
        """
        if not self._all_state_dicts:
            raise RuntimeError(
                "Optimizer state has not been consolidated on this rank. Please call "
                f"`consolidate_state_dict(to={self.rank})` on all ranks beforehand if you "
                "meant to save the global state."
            )
        out = Optimizer.state_dict(self)
        index = self._index()
        for local, groups in zip(self._all_state_dicts, self._partition_parameters(), strict=True):
            for local_group, group in zip(local["param_groups"], groups, strict=True):
                for i, p in zip(local_group["params"], group["params"], strict=True):
                    if i in local["state"]:
                        out["state"][index[id(p)]] = _tensors(local["state"][i])
        out["state"] = dict(sorted(out["state"].items()))
        return out

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a whole state (``state_dict()``'s, or torch's ZeRO's): this rank keeps the
        state of its share, and every group's hyper-parameters.

        Raises:
          ValueError: the groups differ in number or sizes from this optimizer's.
        """
        saved = list(state_dict["param_groups"])
        if len(saved) != len(self.param_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        sizes = [len(g["params"]) for g in self.param_groups]
        if [len(s["params"]) for s in saved] != sizes:
            raise ValueError(
                "loaded state dict contains a parameter group that doesn't match the size of "
                "optimizer's group"
            )
        index, state = self._index(), state_dict["state"]
        local_groups, local_state, k = [], {}, 0
        for s, share in zip(saved, self._partition_parameters()[self.rank], strict=True):
            ids = []
            for p in share["params"]:
                if state.get(index[id(p)]) is not None:
                    local_state[k] = state[index[id(p)]]
                ids.append(k)
                k += 1
            local_groups.append(
                {**{key: v for key, v in s.items() if key != "params"}, "params": ids}
            )
        self.optim.load_state_dict({"state": local_state, "param_groups": local_groups})
        for s, g in zip(saved, self.param_groups, strict=True):
            g.update({k: v for k, v in s.items() if k != "params"})
        self._sync_param_groups(self.param_groups, self.optim.param_groups)

    # ----------------------------------------------------------------- Join
    def join_hook(self, **kwargs: Any) -> JoinHook:
        """The hook that runs ``step()`` on a rank out of inputs (its gradients as they are)."""
        return _ZeroJoinHook(self)

    @property
    def join_device(self) -> Any:
        return self._default_device

    @property
    def join_process_group(self) -> Any:
        return self.process_group
