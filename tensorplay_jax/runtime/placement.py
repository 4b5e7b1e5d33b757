"""Which GPUs each local worker gets: its own, picked by ``LOCAL_RANK``, so workers share a host.

JAX preallocates most of the memory of every GPU a process sees, so N
workers that each see all of a host's GPUs run out of memory. The launcher,
``rpc.spawn`` and ``testing.Workers`` therefore give local worker ``i`` its
own GPUs by setting ``CUDA_VISIBLE_DEVICES`` in its environment (and
``TENSORPLAY_JAX_LOCAL_DEVICES``, which says the launcher did it): with
``devices_per_worker=k`` the GPUs ``i*k .. i*k+k-1`` of those the host shows.
In that worker they are ``cuda:0 .. cuda:k-1`` (what device maps name).

``devices_per_worker``: ``"auto"`` (the default, also from
``TENSORPLAY_JAX_DEVICES_PER_WORKER``) gives one GPU each; with fewer GPUs
than workers, GPU ``i % n`` is shared and preallocation is turned off
(``XLA_PYTHON_CLIENT_PREALLOCATE=false``). ``0`` leaves every GPU visible to
every worker; ``k`` needs ``k`` times the local worker count of GPUs. A host
with no GPUs, or a process whose environment sets ``CUDA_VISIBLE_DEVICES`` to
nothing, is left as it is. TPU hosts are not placed (JAX's convention there
is one process per host, which sees every chip).

Example:
    >>> placement_env(1, 2, "auto", ["0", "1"])
    {'CUDA_VISIBLE_DEVICES': '1', 'TENSORPLAY_JAX_LOCAL_DEVICES': '1'}
    >>> placement_env(1, 2, 0, ["0", "1"])
    {}
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from tensorplay_jax.runtime import settings
from tensorplay_jax.runtime.settings import DEVICES_PER_WORKER_ENV, LOCAL_DEVICES_ENV

__all__ = ["assigned_devices", "placement_env", "visible_gpus", "worker_placement"]

_NVIDIA_GPUS = "/proc/driver/nvidia/gpus"


def visible_gpus(environ: Mapping[str, str] | None = None) -> list[str]:
    """The GPUs a new process with ``environ`` would see, without starting JAX or CUDA.

    ``CUDA_VISIBLE_DEVICES``'s entries when it is set, else one per GPU the
    NVIDIA driver lists (``/proc/driver/nvidia/gpus``), else none.

    Example:
        >>> visible_gpus({"CUDA_VISIBLE_DEVICES": "2,3"})
        ['2', '3']
    """
    env = os.environ if environ is None else environ
    given = env.get("CUDA_VISIBLE_DEVICES")
    if given is not None:
        return [g.strip() for g in given.split(",") if g.strip() and g.strip() != "-1"]
    try:
        return [str(i) for i in range(len(os.listdir(_NVIDIA_GPUS)))]
    except OSError:
        return []


def placement_env(
    local_rank: int, local_world_size: int, per_worker: int | str, gpus: list[str]
) -> dict[str, str]:
    """The variables that give local worker ``local_rank`` its GPUs (see the module docstring).

    Raises:
      ValueError: ``per_worker`` is not ``"auto"`` or a number >= 0, or there are
        fewer than ``per_worker * local_world_size`` GPUs.

    Example:
        >>> placement_env(1, 2, 2, ["0", "1", "2", "3"])["CUDA_VISIBLE_DEVICES"]
        '2,3'
    """
    if per_worker != "auto":
        try:
            per_worker = int(per_worker)
        except ValueError:
            per_worker = -1
        if per_worker < 0:
            raise ValueError(
                f"devices_per_worker={per_worker!r} must be 'auto', 0 (no placement) or a "
                f"number of GPUs (also {DEVICES_PER_WORKER_ENV})"
            )
    if per_worker == 0 or not gpus:
        return {}
    env: dict[str, str] = {}
    if per_worker == "auto":
        if len(gpus) >= local_world_size:
            mine = [gpus[local_rank]]
        else:  # fewer GPUs than workers: share them, with no worker taking most of one
            mine = [gpus[local_rank % len(gpus)]]
            env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    else:
        need = per_worker * local_world_size
        if need > len(gpus):
            raise ValueError(
                f"devices_per_worker={per_worker} for {local_world_size} local workers needs "
                f"{need} GPUs; this host shows {len(gpus)} ({','.join(gpus)}); pass fewer, "
                "'auto' or 0"
            )
        mine = gpus[local_rank * per_worker : (local_rank + 1) * per_worker]
    env["CUDA_VISIBLE_DEVICES"] = env[LOCAL_DEVICES_ENV] = ",".join(mine)
    return env


def worker_placement(
    local_rank: int,
    local_world_size: int,
    per_worker: int | str | None,
    environ: Mapping[str, str],
) -> dict[str, str]:
    """:func:`placement_env` for a worker whose environment will be ``environ``.

    ``per_worker`` None: ``TENSORPLAY_JAX_DEVICES_PER_WORKER`` of ``environ`` (default auto).
    """
    if per_worker is None:
        per_worker = settings.raw(DEVICES_PER_WORKER_ENV, environ) or "auto"
    return placement_env(local_rank, local_world_size, per_worker, visible_gpus(environ))


def assigned_devices() -> list[str] | None:
    """The GPUs the launcher gave this worker (None: it placed none).

    Example:
        >>> assigned_devices() is None or isinstance(assigned_devices(), list)
        True
    """
    given = settings.raw(LOCAL_DEVICES_ENV)
    return None if not given else given.split(",")
