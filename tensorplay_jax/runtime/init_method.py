"""Init methods: where the workers of a job meet, and each one's rank and world size.

One parser for RPC (``init_rpc``) and process groups (``init_process_group``):

- ``env://`` reads ``MASTER_ADDR`` and ``MASTER_PORT``; ``tcp://host:port`` names them;
- a rank or world size not passed comes from ``RANK`` / ``WORLD_SIZE`` (a dynamic RPC
  group, ``world_size=None``, reads no ``WORLD_SIZE``);
- under SLURM, a variable that is unset (or empty) comes from SLURM's
  (``SLURM_PROCID``, ``SLURM_NTASKS``, ``SLURM_LOCALID``, the first host of
  ``SLURM_JOB_NODELIST`` and a port from ``SLURM_JOB_ID``: :func:`slurm_env`);
- a world of one with ``env://`` and neither address variable meets itself on a
  free loopback port (a notebook, a quick test).

The RPC store listens on the port; a process group's JAX coordinator on the port
plus ``PG_COORDINATOR_PORT_OFFSET`` (:func:`coordinator_port`), so one job may run both.

Example:
    >>> resolve_init("tcp://10.0.0.1:1234", 0, 2)
    ('10.0.0.1', 1234, 0, 2)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import urlparse

from tensorplay_jax.runtime import settings
from tensorplay_jax.runtime.launch import free_port
from tensorplay_jax.runtime.settings import PG_COORDINATOR_PORT_OFFSET, SLURM_VARS

__all__ = ["coordinator_port", "local_rank", "resolve_init", "slurm_env"]


def _first_slurm_host(nodelist: str) -> str:
    """First host of a SLURM node list: ``"n[01-04],m"`` -> ``"n01"``."""
    m = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if not m:
        return nodelist
    prefix, ranges = m.group(1), m.group(2)
    if not ranges:
        return prefix
    return prefix + ranges.split(",")[0].split("-")[0]


def slurm_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT derived from SLURM's variables (if any).

    Example:
      >>> slurm_env({"SLURM_PROCID": "3", "SLURM_NTASKS": "8", "SLURM_JOB_NODELIST": "gpu[07-08]",
      ...            "SLURM_JOB_ID": "1234"})["MASTER_ADDR"]
      'gpu07'
    """
    env = settings.read(SLURM_VARS, environ)
    out: dict[str, str] = {}
    if "SLURM_PROCID" in env:
        out["RANK"] = env["SLURM_PROCID"]
    if "SLURM_NTASKS" in env:
        out["WORLD_SIZE"] = env["SLURM_NTASKS"]
    if "SLURM_LOCALID" in env:
        out["LOCAL_RANK"] = env["SLURM_LOCALID"]
    nodes = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if nodes:
        out["MASTER_ADDR"] = _first_slurm_host(nodes)
    if "SLURM_JOB_ID" in env:
        out["MASTER_PORT"] = str(20000 + int(env["SLURM_JOB_ID"]) % 20000)
    return out


def _env(name: str) -> str | None:
    v = settings.raw(name)
    return v if v else slurm_env().get(name)


def local_rank() -> int | None:
    """This process's rank on its node: ``LOCAL_RANK`` (or SLURM's), None when unset.

    Example:
      >>> local_rank() is None or local_rank() >= 0
      True
    """
    v = _env("LOCAL_RANK")
    return None if v is None else int(v)


def coordinator_port(port: int) -> int:
    """The port a process group's JAX coordinator takes beside a job's rendezvous ``port``.

    Example:
      >>> coordinator_port(29500)
      29501
    """
    return port + PG_COORDINATOR_PORT_OFFSET


def resolve_init(
    init_method: str,
    rank: int | None,
    world_size: int | None,
    *,
    fn: str = "init_rpc",
    dynamic: bool = False,
) -> tuple[str, int, int, int | None]:
    """``(host, port, rank, world_size)`` from the init method, the arguments and the environment.

    Args:
      init_method: ``"env://"`` or ``"tcp://host:port"``.
      rank: this process's rank; None or negative reads ``RANK`` (or SLURM's).
      world_size: the number of processes; None reads ``WORLD_SIZE`` (or SLURM's), unless
        ``dynamic``.
      fn: the public function asking (named in errors).
      dynamic: world size None means a dynamic RPC group (tensorplay's rule: ``WORLD_SIZE``
        is not read, since every launcher sets it); its rank is the argument, or ``RANK``
        with ``env://``.

    Raises:
      ValueError: an unsupported or malformed init method, a missing address,
        rank or world size, or a rank outside ``[0, world_size)``.

    Example:
      >>> resolve_init("tcp://127.0.0.1:29500", 1, 2, fn="init_process_group")
      ('127.0.0.1', 29500, 1, 2)
    """
    url = urlparse(init_method)
    if url.scheme not in ("env", "tcp"):
        raise ValueError(
            f"{fn}: init_method={init_method!r} is not supported; use 'env://' or 'tcp://host:port'."
        )
    if url.scheme == "tcp" and (not url.hostname or not url.port):
        raise ValueError(f"{fn}: init_method={init_method!r} must look like 'tcp://host:port'.")
    group_is_dynamic = dynamic and world_size is None
    if rank is None or rank < 0:
        if group_is_dynamic and url.scheme != "env":
            raise ValueError(
                f"{fn}: rank parameter missing: a dynamic group (world_size=None) with "
                f"init_method={init_method!r} needs rank= (only 'env://' reads RANK)"
            )
        r = _env("RANK")
        if r is None and group_is_dynamic:
            raise ValueError(
                f"{fn}: environment variable RANK expected: a dynamic group (world_size=None) "
                "with init_method='env://' reads its rank from RANK, or pass rank="
            )
        rank = None if r is None else int(r)
    if world_size is None and not group_is_dynamic:
        w = _env("WORLD_SIZE")
        world_size = None if w is None else int(w)
    if url.scheme == "tcp":
        host, port = url.hostname, url.port
    else:
        host, port = _env("MASTER_ADDR"), _env("MASTER_PORT")
        if world_size == 1 and not (host or port):
            host, port = "127.0.0.1", free_port("127.0.0.1")
        missing = [v for v, got in (("MASTER_ADDR", host), ("MASTER_PORT", port)) if not got]
        if missing:
            raise ValueError(
                f"{fn}: init_method='env://' needs {' and '.join(missing)} in the environment "
                "(or use init_method='tcp://host:port')."
            )
    if rank is None:
        raise ValueError(f"{fn}: rank was not given and RANK is not set in the environment")
    if world_size is None and dynamic:
        if rank < 0:
            raise ValueError(f"{fn}: a dynamic group (world_size=None) needs rank >= 0")
        return host, int(port), rank, None
    if world_size is None:
        raise ValueError(
            f"{fn}: world_size was not given and WORLD_SIZE is not set in the environment"
        )
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(
            f"{fn}: need 0 <= rank < world_size, got rank={rank}, world_size={world_size}; "
            "pass them or set RANK and WORLD_SIZE."
        )
    return host, int(port), rank, world_size
