"""An optimizer's ``state_dict`` in torch's layout, and loading one back (ours or torch's).

The layout is torch's: ``{"state": {index: {key: tensor}}, "param_groups":
[{hyper-parameters..., "params": [index, ...]}]}``, parameters numbered across
groups in order. Loading maps the indices back onto this optimizer's parameters,
takes the saved hyper-parameters (as torch does) and converts each saved value
to a JAX array: floating state in its parameter's dtype, ``"step"`` as float32
(torch keeps it a float32 Tensor). Values may be our Tensors, JAX or NumPy arrays,
or torch's CPU tensors (anything ``numpy.asarray`` reads).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tensorplay_jax.tensors import Tensor

__all__ = ["save", "load"]


def save(groups: list[dict[str, Any]], state: dict[Tensor, dict[str, jax.Array]]) -> dict:
    """``Optimizer.state_dict()`` of ``groups`` and per-parameter ``state``."""
    index: dict[int, int] = {}
    packed = []
    for g in groups:
        ids = []
        for p in g["params"]:
            index.setdefault(id(p), len(index))
            ids.append(index[id(p)])
        packed.append({**{k: v for k, v in g.items() if k != "params"}, "params": ids})
    saved = {
        index[id(p)]: {k: Tensor(v) for k, v in s.items()}
        for g in groups
        for p in g["params"]
        if (s := state.get(p)) is not None
    }
    return {"state": saved, "param_groups": packed}


def _array(value: Any, like: jax.Array, key: str) -> jax.Array:
    v = value.value if isinstance(value, Tensor) else value
    if not isinstance(v, jax.Array):
        v = np.asarray(v.detach().cpu() if hasattr(v, "detach") else v)
    if key == "step":
        return jnp.asarray(v, jnp.float32)
    v = jnp.asarray(v)
    if jnp.issubdtype(like.dtype, jnp.inexact) and jnp.issubdtype(v.dtype, jnp.inexact):
        return v.astype(like.dtype)
    return v


def load(
    name: str, groups: list[dict[str, Any]], state_dict: Mapping[str, Any]
) -> dict[Tensor, dict[str, jax.Array]]:
    """Check ``state_dict`` against ``groups``, update their hyper-parameters; the new state."""
    if not isinstance(state_dict, Mapping) or not {"state", "param_groups"} <= set(state_dict):
        raise ValueError(
            f"{name}.load_state_dict: state_dict must be a dict with 'state' and 'param_groups' "
            "(what state_dict() returns)"
        )
    saved_groups = list(state_dict["param_groups"])
    if len(saved_groups) != len(groups):
        raise ValueError(
            f"{name}.load_state_dict: loaded state dict has {len(saved_groups)} parameter "
            f"groups, this optimizer has {len(groups)}"
        )
    for i, (g, s) in enumerate(zip(groups, saved_groups, strict=True)):
        if len(g["params"]) != len(s["params"]):
            raise ValueError(
                f"{name}.load_state_dict: loaded state dict's parameter group {i} has "
                f"{len(s['params'])} parameters, this optimizer's has {len(g['params'])}"
            )
    by_index = {
        i: p
        for g, s in zip(groups, saved_groups, strict=True)
        for i, p in zip(s["params"], g["params"], strict=True)
    }
    state: dict[Tensor, dict[str, jax.Array]] = {}
    for i, entry in state_dict["state"].items():
        p = by_index.get(int(i))
        if p is None:
            continue
        state[p] = {k: _array(v, p.value, k) for k, v in entry.items() if v is not None}
    for g, s in zip(groups, saved_groups, strict=True):
        g.update({k: v for k, v in s.items() if k != "params"})
    return state
