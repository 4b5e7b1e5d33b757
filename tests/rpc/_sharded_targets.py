"""Functions the sharded-array tests run on workers (importable: they travel by reference)."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

import tensorplay_jax as tp
from tensorplay_jax import rpc
from tensorplay_jax.runtime.device import device_name

_baseline: list[int] = []


def _value(x: Any) -> jax.Array:
    return x._value if isinstance(x, tp.Tensor) else x


def layout(x: Any) -> dict[str, Any]:
    """How ``x`` is sharded here: mesh devices by name, mesh shape, axis names, spec."""
    s = _value(x).sharding
    return {
        "devices": [device_name(d) for d in s.mesh.devices.flat],
        "mesh_shape": list(s.mesh.devices.shape),
        "axes": list(s.mesh.axis_names),
        "spec": [list(p) if isinstance(p, tuple) else p for p in s.spec],
        "dtype": str(_value(x).dtype),
    }


def echo(x: Any) -> Any:
    """``x`` itself (the reply goes back by the inverse map)."""
    return x


def double(x: Any) -> Any:
    """``2 * x``, computed where ``x`` is (keeps its sharding)."""
    return x * 2


_kept: list[Any] = []


def keep_and_echo(x: Any) -> Any:
    """Keep ``x`` as it arrived (see :func:`kept_values`), and send it back."""
    _kept.append(x)
    return x


def kept_values() -> list[np.ndarray]:
    """Host copies of what :func:`keep_and_echo` kept, in order."""
    return [np.array(_value(x)) for x in _kept]


def forget() -> None:
    """Drop what :func:`keep_and_echo` kept."""
    _kept.clear()


def values_and_layout(x: Any) -> tuple[np.ndarray, dict[str, Any]]:
    """A host copy of ``x`` and its layout here."""
    return np.asarray(_value(x)), layout(x)


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def reset_peak() -> None:
    """Reset this process's peak RSS (``/proc/self/clear_refs``) and remember the RSS now."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    _baseline[:] = [_status("VmRSS")]


def peak_rise(x: Any = None) -> int:
    """Bytes the peak RSS rose since :func:`reset_peak` (``x`` is what arrived meanwhile)."""
    return _status("VmHWM") - _baseline[0]


def send_sharded(to: str, size: int, devices: list[str]) -> int:
    """Make a float32 array of ``size`` bytes sharded over ``devices`` here, send it to ``to``.

    Returns the bytes this process's peak RSS rose while sending (the array made first).
    """
    devs = [jax.devices("cpu")[int(d[4:])] for d in devices]
    mesh = jax.sharding.Mesh(np.array(devs), ("x",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("x"))
    x = jax.jit(lambda: jax.numpy.ones(size // 4, jax.numpy.float32), out_shardings=sharding)()
    x.block_until_ready()
    reset_peak()
    assert rpc.rpc_sync(to, nbytes, args=(x,)) == size
    return peak_rise()


def nbytes(x: Any) -> int:
    """``x.nbytes`` (what arrived; nothing goes back but the count)."""
    return int(_value(x).nbytes)


def make_sharded(devices: list[str], axes: list[str], shape: list[int], spec: list[Any]) -> Any:
    """``arange`` of ``shape`` (float32) sharded by ``spec`` over a mesh of this worker's
    ``devices`` (reshaped to one axis per name in ``axes``, each of size 2 but the last)."""
    devs = np.array([jax.devices("cpu")[int(d[4:])] for d in devices])
    mesh = jax.sharding.Mesh(devs.reshape(-1) if len(axes) == 1 else devs.reshape(2, -1),
                             tuple(axes))  # fmt: skip
    parts = [tuple(p) if isinstance(p, list) else p for p in spec]
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*parts))
    return jax.device_put(np.arange(np.prod(shape), dtype=np.float32).reshape(shape), sharding)


def send_made(to: str, devices: list[str], axes: list[str], shape: list[int], spec: list[Any]):
    """Send :func:`make_sharded`'s array to ``to``; its layout there."""
    return rpc.rpc_sync(to, layout, args=(make_sharded(devices, axes, shape, spec),))


class Scaler:
    """An object held by an RRef: its method takes and returns arrays."""

    def __init__(self, factor: float) -> None:
        self.factor = factor

    def scale(self, x: Any) -> Any:
        """``factor * x`` where ``x`` is."""
        return x * self.factor

    def layout_of(self, x: Any) -> dict[str, Any]:
        """:func:`layout` of ``x`` as it arrived."""
        return layout(x)
