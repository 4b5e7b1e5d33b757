"""Run a per-rank function as one global function in every execution mode we support.

Global layout: ``X[r]`` is rank r's input (``X`` has shape ``(N, *s)``); the global
output ``Y[r]`` is rank r's output. The 2-D mesh mode adds a leading axis of size M
for a second mesh axis ``"j"``; the collective runs over ``"i"`` only.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import numpy as np
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

AXIS = "i"
MODES = (
    "shard_map-jit",
    "shard_map-eager",
    "shard_map-novma-jit",
    "shard_map-novma-eager",
    "pmap",
    "mesh2d-jit",
)


def mesh(shape: tuple[int, ...], names: tuple[str, ...]) -> jax.sharding.Mesh:
    size = int(np.prod(shape))
    return jax.make_mesh(
        shape, names, axis_types=(AxisType.Auto,) * len(shape), devices=jax.devices()[:size]
    )


def second_axis(n: int) -> int:
    return 2 if 2 * n <= jax.device_count() else 1


def spmd(f: Callable, mode: str, n: int) -> Callable:
    """``f(x_rank, axis_name) -> y_rank`` as a function of the global ``X``."""
    if mode == "pmap":
        return jax.pmap(lambda x: f(x, AXIS), axis_name=AXIS, devices=jax.devices()[:n])
    if mode.startswith("mesh2d"):
        m = mesh((second_axis(n), n), ("j", AXIS))
        g = jax.shard_map(
            lambda x: f(x[0, 0], AXIS)[None, None],
            mesh=m,
            in_specs=P("j", AXIS),
            out_specs=P("j", AXIS),
        )
        return jax.jit(g)
    g = jax.shard_map(
        lambda x: f(x[0], AXIS)[None],
        mesh=mesh((n,), (AXIS,)),
        in_specs=P(AXIS),
        out_specs=P(AXIS),
        check_vma="novma" not in mode,
    )
    return jax.jit(g) if mode.endswith("jit") else g


def global_shape(mode: str, n: int, per_rank: tuple) -> tuple:
    if mode.startswith("mesh2d"):
        return (second_axis(n), n, *per_rank)
    return (n, *per_rank)


def oracle(ref: Callable, mode: str) -> Callable[[np.ndarray], np.ndarray]:
    """The numpy reference as a function of the global input (float64)."""

    def one(x: np.ndarray) -> np.ndarray:
        return np.stack(ref([np.asarray(xr) for xr in x]))

    if mode.startswith("mesh2d"):
        return lambda x: np.stack([one(xj) for xj in x])
    return one


def numeric_jacobian(g: Callable, x: np.ndarray, h: float = 1e-6) -> np.ndarray:
    """Central-difference Jacobian (out.size, in.size) of a float64 numpy function."""
    x = np.asarray(x, np.float64)
    y0 = g(x)
    jac = np.zeros((y0.size, x.size))
    flat = x.reshape(-1)
    for k in range(x.size):
        e = np.zeros_like(flat)
        e[k] = h
        jac[:, k] = (g((flat + e).reshape(x.shape)) - g((flat - e).reshape(x.shape))).ravel() / (
            2 * h
        )
    return jac
