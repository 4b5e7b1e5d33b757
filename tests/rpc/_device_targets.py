"""Functions the device-map tests run on workers (importable: they travel by reference)."""

from __future__ import annotations

import os
from typing import Any

import jax
import numpy as np

import tensorplay_jax as tp
from tensorplay_jax import rpc
from tensorplay_jax.runtime.device import device_name, resolve_device


def where(x: Any) -> str:
    """The device ``x`` (a ``jax.Array`` or a Tensor) arrived on, by name."""
    (dev,) = (x._value if isinstance(x, tp.Tensor) else x).devices()
    return device_name(dev)


def double(x: Any) -> Any:
    """``2 * x``, on the device ``x`` is on."""
    return x * 2


def put_on(values: list[float], device: str) -> jax.Array:
    """``values`` as an array on this worker's ``device``."""
    return jax.device_put(np.asarray(values, np.float32), resolve_device(device))


def send_from(to: str, device: str) -> str:
    """Send an array on this worker's ``device`` to ``to``; where it arrived there."""
    return rpc.rpc_sync(to, where, args=(put_on([1.0, 2.0], device),))


def held_where(rref: rpc.RRef) -> str:
    """The device of the value ``rref`` (owned here) holds."""
    return where(rref.local_value())


def environment(names: list[str]) -> list[str | None]:
    """These environment variables of this worker."""
    return [os.environ.get(n) for n in names]


def square_sum_where(x: Any) -> Any:
    """``sum(x * x)``; asserts first that ``x`` arrived on cpu:2 (unless it is traced)."""
    if not isinstance(x, jax.core.Tracer):
        assert where(x) == "cpu:2", where(x)
    return (x * x).sum()
