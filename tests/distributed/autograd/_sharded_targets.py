"""Targets of the sharded distributed-autograd tests (importable: they travel by reference)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import tensorplay_jax as tp
from tensorplay_jax import rpc
from tensorplay_jax.runtime.device import device_name

_held: dict[str, tp.Tensor] = {}


def devices_of(x: Any) -> list[str]:
    """The names of the devices of ``x``'s mesh, in mesh order (asserts it is sharded)."""
    v = x.value if isinstance(x, tp.Tensor) else x
    assert len(v.sharding.device_set) > 1, v.sharding
    return [device_name(d) for d in v.sharding.mesh.devices.flat]


def stage(x: tp.Tensor) -> tp.Tensor:
    """``sum(sin(x) * x)``, recorded here; asserts ``x`` arrived sharded on ``cpu:4..7``."""
    assert devices_of(x) == ["cpu:4", "cpu:5", "cpu:6", "cpu:7"], devices_of(x)
    return (tp.sin(x) * x).sum()


def stage_out(x: tp.Tensor) -> tp.Tensor:
    """``x * x`` (a sharded result that goes back sharded)."""
    return x * x


def jax_stage(x: jax.Array) -> jax.Array:
    """``sum(sin(x) * x)`` for the functional mode (plain JAX)."""
    return jnp.sum(jnp.sin(x) * x)


def tape_stage(x: tp.Tensor) -> tp.Tensor:
    """``sum(sin(x) * x)`` for the functional tape mode (tensorplay code)."""
    return (tp.sin(x) * x).sum()


def make_parameter(values: list[float]) -> rpc.RRef:
    """A parameter here, sharded over ``cpu:4..7`` (``P("x")``); an RRef to it."""
    mesh = jax.sharding.Mesh(np.array(jax.devices("cpu")[4:8]), ("x",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("x"))
    p = tp.tensor(jax.device_put(np.asarray(values, np.float32), sharding), requires_grad=True)
    _held["p"] = p
    return rpc.RRef(p)


def weighted(p_rref: rpc.RRef, x: tp.Tensor) -> tp.Tensor:
    """``sum(p * x)`` with this worker's parameter ``p`` (held by ``p_rref``)."""
    return (p_rref.local_value() * x).sum()


def parameter_state() -> tuple[np.ndarray, list[str]]:
    """The held parameter's values and its mesh's devices."""
    p = _held["p"]
    return np.asarray(p.value), devices_of(p)


def sharded_linear() -> tp.nn.Module:
    """``tp.nn.Linear(8, 4)`` (seeded) with its weight split by columns and its bias by
    rows over this worker's ``cpu:4..7`` (axis ``"x"``)."""
    tp.manual_seed(0)
    module = tp.nn.Linear(8, 4)
    mesh = jax.sharding.Mesh(np.array(jax.devices("cpu")[4:8]), ("x",))
    P = jax.sharding.PartitionSpec
    with tp.no_grad():
        module.weight.data = jax.device_put(
            module.weight.value, jax.sharding.NamedSharding(mesh, P(None, "x"))
        )
        module.bias.data = jax.device_put(
            module.bias.value, jax.sharding.NamedSharding(mesh, P("x"))
        )
    return module
