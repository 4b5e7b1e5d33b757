"""Init methods: where the workers of a job meet, and each one's rank and world size.

One parser for RPC (``init_rpc``) and process groups (``init_process_group``):

- ``env://`` reads ``MASTER_ADDR`` and ``MASTER_PORT``; ``tcp://host:port`` names them;
- ``file:///path`` names a file (on a filesystem every rank shares) that holds a
  :class:`~tensorplay_jax.runtime.file_store.FileStore`: rank 0 picks a free port
  on its address and writes both there; the other ranks wait for them
  (:func:`file_master`). Each process holds its handle on the file until
  :func:`release` (``rpc.shutdown()``, ``destroy_process_group()``) or its exit,
  and the last one out deletes the file, so the next job may reuse the name;
- a rank or world size not passed comes from ``RANK`` / ``WORLD_SIZE`` (a dynamic RPC
  group, ``world_size=None``, reads no ``WORLD_SIZE``);
- under SLURM, a variable that is unset (or empty) comes from SLURM's
  (``SLURM_PROCID``, ``SLURM_NTASKS``, ``SLURM_LOCALID``, the first host of
  ``SLURM_JOB_NODELIST`` and a port from ``SLURM_JOB_ID``: :func:`slurm_env`);
- a world of one with ``env://`` and neither address variable meets itself on a
  free loopback port (a notebook, a quick test).

The schemes map to their resolvers in one table (``_SCHEMES``). The RPC store
listens on the port; a process group's JAX coordinator on the port
plus ``PG_COORDINATOR_PORT_OFFSET`` (:func:`coordinator_port`), so one job may run both.

Example:
    >>> resolve_init("tcp://10.0.0.1:1234", 0, 2)
    ('10.0.0.1', 1234, 0, 2)
"""

from __future__ import annotations

import atexit
import json
import os
import re
import socket
import time
from collections.abc import Callable, Mapping
from urllib.parse import ParseResult, urlparse

from tensorplay_jax.runtime import settings
from tensorplay_jax.runtime.address import local_address
from tensorplay_jax.runtime.file_store import FileStore, FileStoreTimeout
from tensorplay_jax.runtime.launch import free_port, pid_alive
from tensorplay_jax.runtime.settings import (
    FILE_STORE_POLL_MAX_S,
    PG_COORDINATOR_PORT_OFFSET,
    RPC_INIT_TIMEOUT_S,
    SLURM_VARS,
)

__all__ = [
    "coordinator_port",
    "file_master",
    "local_rank",
    "release",
    "resolve_init",
    "slurm_env",
]


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


def _tcp_master(url: ParseResult, init_method: str, fn: str, **_: object) -> tuple[str, int]:
    if not url.hostname or not url.port:
        raise ValueError(f"{fn}: init_method={init_method!r} must look like 'tcp://host:port'.")
    return url.hostname, url.port


def _env_master(
    url: ParseResult, init_method: str, fn: str, world_size: int | None, **_: object
) -> tuple[str, int]:
    host, port = _env("MASTER_ADDR"), _env("MASTER_PORT")
    if world_size == 1 and not (host or port):
        return "127.0.0.1", free_port("127.0.0.1")
    missing = [v for v, got in (("MASTER_ADDR", host), ("MASTER_PORT", port)) if not got]
    if missing:
        raise ValueError(
            f"{fn}: init_method='env://' needs {' and '.join(missing)} in the environment "
            "(or use init_method='tcp://host:port')."
        )
    return str(host), int(str(port))


def _file_master(
    url: ParseResult, init_method: str, fn: str, rank: int, timeout: float, **_: object
) -> tuple[str, int]:
    if url.netloc not in ("", "localhost") or not url.path or url.path.endswith("/"):
        raise ValueError(
            f"{fn}: init_method={init_method!r} must look like 'file:///absolute/path/to/file'."
        )
    return file_master(url.path, fn, rank, timeout)


# scheme -> resolver of (host, port): one entry per init method.
_SCHEMES: dict[str, Callable[..., tuple[str, int]]] = {
    "env": _env_master,
    "tcp": _tcp_master,
    "file": _file_master,
}
_NEEDS_RANK = {"file"}  # schemes whose resolver needs the checked rank (rank 0 writes)
_HELD: dict[str, FileStore] = {}  # fn -> this process's handle on its file store
_ROUNDS: dict[tuple[str, str], int] = {}  # (fn, path) -> file rendezvous so far


def _this_machine() -> str:
    """Host name, boot and pid namespace: equal values mean a pid here names the same process."""
    parts = [socket.gethostname()]
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            parts.append(f.read().strip())
        parts.append(str(os.stat("/proc/self/ns/pid").st_ino))
    except OSError:
        pass
    return "/".join(parts)


def file_master(path: str, fn: str, rank: int, timeout: float) -> tuple[str, int]:
    """Where rank 0 of the job that meets in the file ``path`` serves: ``(host, port)``.

    Rank 0 picks them (its address as ``runtime.address.local_address`` chooses it
    for a job at loopback: ``127.0.0.1`` on one host; and a free port with the next
    one free too) and writes them to the file store; every other rank waits for
    them. The key holds ``fn`` and how many times this process met there for
    ``fn``, so RPC and a process group can share the file, and meet again in it.
    An entry written by a rank 0 on this machine whose process is gone (a job
    that was killed left the file) is not taken: the wait goes on for a fresh one.
    This process keeps its handle open until :func:`release` ``(fn)``.

    Raises:
      ValueError: the file cannot be used (``FileStoreError``), or rank 0's address
        is ambiguous.
      TimeoutError: rank 0 did not write within ``timeout`` seconds.
    """
    release(fn)
    store = _HELD[fn] = FileStore(path, timeout, fn=fn)
    n = _ROUNDS[(fn, store.path)] = _ROUNDS.get((fn, store.path), 0) + 1
    key = f"{fn}/{n}/master"
    if rank == 0:
        try:
            host = local_address("127.0.0.1")
        except ValueError as e:
            raise ValueError(f"{fn}: {e}") from None
        port = free_port(host)
        me = {"host": host, "port": port, "pid": os.getpid(), "machine": _this_machine()}
        store.set(key, json.dumps(me))
        return host, port
    deadline = time.monotonic() + timeout
    while True:
        try:
            got = json.loads(store.get(key, max(deadline - time.monotonic(), 0.0)))
        except FileStoreTimeout:
            raise TimeoutError(
                f"{fn}: rank 0 did not write its address to the file {store.path!r} within "
                f"{timeout:g} s; is rank 0 running with the same init_method?"
            ) from None
        if got["machine"] != _this_machine() or pid_alive(int(got["pid"])):
            return str(got["host"]), int(got["port"])
        if time.monotonic() >= deadline:
            raise TimeoutError(
                f"{fn}: the file {store.path!r} holds the address of a rank 0 that has exited "
                f"(pid {got['pid']}), and no fresh one came within {timeout:g} s; it was "
                "left by a job that was killed: delete it, or use another file."
            )
        time.sleep(FILE_STORE_POLL_MAX_S)


def release(fn: str) -> None:
    """Close this process's handle on the file store that ``fn`` met in (if any).

    The last handle closed deletes the file. Called by ``rpc.shutdown()``
    (``fn="init_rpc"``) and ``destroy_process_group()`` (``"init_process_group"``),
    and for every handle still open when the process exits.
    """
    store = _HELD.pop(fn, None)
    if store is not None:
        store.close()


@atexit.register
def _release_all() -> None:
    for fn in list(_HELD):
        release(fn)


def resolve_init(
    init_method: str,
    rank: int | None,
    world_size: int | None,
    *,
    fn: str = "init_rpc",
    dynamic: bool = False,
    timeout: float = RPC_INIT_TIMEOUT_S,
) -> tuple[str, int, int, int | None]:
    """``(host, port, rank, world_size)`` from the init method, the arguments and the environment.

    Args:
      init_method: ``"env://"``, ``"tcp://host:port"`` or ``"file:///path"``.
      rank: this process's rank; None or negative reads ``RANK`` (or SLURM's).
      world_size: the number of processes; None reads ``WORLD_SIZE`` (or SLURM's), unless
        ``dynamic``.
      fn: the public function asking (named in errors).
      dynamic: world size None means a dynamic RPC group (tensorplay's rule: ``WORLD_SIZE``
        is not read, since every launcher sets it); its rank is the argument, or ``RANK``
        with ``env://``.
      timeout: how long a rank waits for rank 0's address (``file://`` only).

    Raises:
      ValueError: an unsupported or malformed init method, a missing address,
        rank or world size, a rank outside ``[0, world_size)``, or a file that
        cannot hold the store.
      TimeoutError: ``file://``: rank 0 did not write its address in time.

    Example:
      >>> resolve_init("tcp://127.0.0.1:29500", 1, 2, fn="init_process_group")
      ('127.0.0.1', 29500, 1, 2)
    """
    url = urlparse(init_method)
    if url.scheme not in _SCHEMES:
        raise ValueError(
            f"{fn}: init_method={init_method!r} is not supported; use 'env://', "
            "'tcp://host:port' or 'file:///path'."
        )
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
    kw = {"init_method": init_method, "fn": fn, "world_size": world_size, "timeout": timeout}
    # An address found without the rank is checked first; a file's needs the rank checked.
    master = None if url.scheme in _NEEDS_RANK else _SCHEMES[url.scheme](url, rank=rank, **kw)
    if rank is None:
        raise ValueError(f"{fn}: rank was not given and RANK is not set in the environment")
    if world_size is None and not dynamic:
        raise ValueError(
            f"{fn}: world_size was not given and WORLD_SIZE is not set in the environment"
        )
    if world_size is None and rank < 0:
        raise ValueError(f"{fn}: a dynamic group (world_size=None) needs rank >= 0")
    if world_size is not None and (world_size < 1 or not 0 <= rank < world_size):
        raise ValueError(
            f"{fn}: need 0 <= rank < world_size, got rank={rank}, world_size={world_size}; "
            "pass them or set RANK and WORLD_SIZE."
        )
    host, port = master or _SCHEMES[url.scheme](url, rank=rank, **kw)
    return host, int(port), rank, world_size
