"""Parsing ``remote_device`` strings: ``"worker/device"`` or ``"rank:N/device"``."""

from __future__ import annotations

import re
from typing import NamedTuple

from tensorplay_jax.runtime.device import DEVICE_TYPES, parse_device

__all__ = ["DEVICE_TYPES", "RemoteDevice", "parse_remote_device"]

_RANK_RE = re.compile(r"^rank:(\d+)$")


class RemoteDevice(NamedTuple):
    """Where a remote module lives: a worker (by name or rank) and a device on it.

    Attributes:
      worker: the worker's name, or None when given by rank.
      rank: the worker's rank, or None when given by name.
      device: ``"cpu"``, ``"cuda:0"``, ... (``"cpu"`` when the string names none).
    """

    worker: str | None
    rank: int | None
    device: str

    @property
    def destination(self) -> str | int:
        """What ``rpc_sync`` takes as ``to``: the name, or the rank."""
        return self.worker if self.worker is not None else self.rank  # type: ignore[return-value]

    def __str__(self) -> str:
        who = self.worker if self.worker is not None else f"rank:{self.rank}"
        return f"{who}/{self.device}"


def parse_remote_device(remote_device: str) -> RemoteDevice:
    """Parse ``"worker/device"``, ``"rank:N/device"`` or just ``"worker"`` (device cpu).

    Args:
      remote_device: the string, e.g. ``"worker1/cpu"``, ``"rank:1/cuda:0"``, ``"ps"``.

    Returns:
      A :class:`RemoteDevice`.

    Raises:
      TypeError: ``remote_device`` is not a string.
      ValueError: empty, more than one ``/``, an empty worker or device part,
        a bad ``rank:N``, or an unknown device type.

    Example:
      >>> parse_remote_device("worker1/cpu")
      RemoteDevice(worker='worker1', rank=None, device='cpu')
      >>> parse_remote_device("rank:2/cuda:1")
      RemoteDevice(worker=None, rank=2, device='cuda:1')
      >>> parse_remote_device("ps").device
      'cpu'
    """
    if not isinstance(remote_device, str):
        raise TypeError(
            f"RemoteModule: remote_device={remote_device!r} must be a string like "
            "'worker1/cpu' or 'rank:1/cpu'"
        )
    what = f"RemoteModule: remote_device={remote_device!r}"
    if not remote_device.strip():
        raise ValueError(f"{what} is empty; expected 'worker/device' or 'rank:N/device'")
    parts = remote_device.split("/")
    if len(parts) > 2:
        raise ValueError(
            f"{what} has {len(parts) - 1} '/' separators; expected 'worker/device' "
            "(e.g. 'worker1/cpu') or 'rank:N/device'"
        )
    who = parts[0]
    device = parts[1] if len(parts) == 2 else "cpu"
    if not who:
        raise ValueError(f"{what} names no worker; expected 'worker/device' or 'rank:N/device'")
    if not device:
        raise ValueError(f"{what} names no device after '/'; write e.g. '{who}/cpu' or '{who}'")
    parse_device(device, what)  # the one parser of device names (tensors use it too)
    if who.startswith("rank:"):
        r = _RANK_RE.match(who)
        if r is None:
            raise ValueError(f"{what}: bad rank {who!r}; write 'rank:N' with N a non-negative int")
        return RemoteDevice(None, int(r.group(1)), device)
    return RemoteDevice(who, None, device)
