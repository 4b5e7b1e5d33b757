"""Averaging parameters across a process group, in one all-reduce of their concatenation."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import tensorplay_jax.process_group as dist
from tensorplay_jax.runtime import flat as flat_buffer
from tensorplay_jax.tensors import Tensor

__all__ = ["average_parameters", "average_parameters_or_parameter_groups", "get_params_to_average"]


def average_parameters(params: Iterable[Tensor], process_group: Any = None) -> None:
    """Set each parameter to its mean across ``process_group`` (default: every process).

    The values go in one all-reduce of their concatenation (in the first parameter's
    dtype); each parameter is then written as ``p.data = ...`` does (its version is
    unchanged, as torch's ``p.data`` assignment leaves it). A process outside the
    group does nothing.

    Example (every rank of a job)::

        average_parameters(model.parameters(), None)  # the replicas equal again
    """
    ps = list(params)
    if not ps or dist.get_rank(process_group) < 0:
        return
    n = dist.get_world_size(process_group)
    buf = flat_buffer.flatten([p.value for p in ps], ps[0].dtype) / n
    values = flat_buffer.split(dist.all_reduce(buf, group=process_group), [p.shape for p in ps])
    for p, v in zip(ps, values, strict=True):
        p.data = v.astype(p.dtype)


def get_params_to_average(params: Iterable[Any]) -> list[Tensor]:
    """The parameters that have a gradient, from parameters or optimizer param groups.

    Raises:
      NotImplementedError: an item is neither a Tensor nor a param-group dict.

    Example:
      >>> import tensorplay_jax as tp
      >>> w, b = tp.nn.Parameter(tp.ones(2)), tp.nn.Parameter(tp.ones(1))
      >>> (w.sum() * 2).backward()
      >>> get_params_to_average([{"params": [w, b]}]) == [w]
      True
    """
    out = []
    for item in params:
        if isinstance(item, Tensor):
            group = [item]
        elif isinstance(item, dict):
            group = item["params"]
        else:
            raise NotImplementedError(f"Parameter input of type {type(item)} is not supported")
        out.extend(p for p in group if p.grad is not None)
    return out


def average_parameters_or_parameter_groups(params: Iterable[Any], process_group: Any) -> None:
    """:func:`average_parameters` of those of ``params`` (a model's parameters or an
    optimizer's param groups) that have a gradient."""
    average_parameters(get_params_to_average(params), process_group)
