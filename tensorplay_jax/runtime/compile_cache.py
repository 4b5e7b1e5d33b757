"""The job's compilation cache: one JAX persistent cache directory for a launcher's workers.

Workers of one job run the same programs (trainers of one model, pipeline
stages built from the same layers), and each process compiles what it runs.
With JAX's persistent compilation cache in a directory they share, a program
one worker compiled is loaded from disk by the others and by every later job
the same process starts. :func:`job_cache_env` gives ``rpc.spawn`` and
``python -m tensorplay_jax.run`` the variables that point their workers at
that directory: it is made on first use, lives as long as the process that
made it, and is removed when that process exits. Every program is cached
(JAX's minimum compile time and entry size are 0 unless set).

A cache the user chose is left alone: nothing is added when
``JAX_COMPILATION_CACHE_DIR`` is set (in this environment or in the variables
given to the workers), when this process's ``jax.config`` names a directory,
or when ``JAX_ENABLE_COMPILATION_CACHE`` turns JAX's cache off.
``TENSORPLAY_JAX_JOB_COMPILATION_CACHE=0`` turns the job's cache off.

Workers write the directory concurrently. JAX's file cache (its
``LRUCache`` without a size limit) takes no lock: it writes an entry in place
(truncate, then one write) and skips a key whose file exists. Workers that
compile the same program at the same moment both miss and both write; the
file ends as the last writer's compressed entry, at most followed by the tail
of a longer one, which zlib (JAX's compressor without zstandard) ignores. A
worker that reads an entry while it is being written gets a short stream: JAX
warns ("Error reading persistent compilation cache entry") and compiles the
program itself, as it would with no cache.

Example:
    >>> env = job_cache_env("spawn", environ={"JAX_COMPILATION_CACHE_DIR": "/mine"})
    >>> env  # the user's own cache: nothing added
    {}
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Mapping

from tensorplay_jax.runtime import settings
from tensorplay_jax.runtime.settings import (
    JAX_CACHE_DIR_ENV,
    JAX_CACHE_ENABLE_ENV,
    JAX_CACHE_MIN_COMPILE_S_ENV,
    JAX_CACHE_MIN_ENTRY_ENV,
    JOB_CACHE_ENV,
)

__all__ = ["job_cache_dir", "job_cache_env"]

_lock = threading.Lock()
_dir: str | None = None  # this process's job cache, once made
_owner: int | None = None  # the pid that made it (a forked child never removes it)


def job_cache_dir() -> str:
    """This process's job cache directory, made on the first call and removed at exit.

    Example:
        >>> d = job_cache_dir()
        >>> os.path.isdir(d) and d == job_cache_dir()
        True
    """
    global _dir, _owner
    with _lock:
        if _dir is None or _owner != os.getpid() or not os.path.isdir(_dir):
            _dir = tempfile.mkdtemp(prefix="tpj-job-jax-cache-")
            _owner = os.getpid()
            atexit.register(_remove, _dir, _owner)
        return _dir


def _remove(path: str, owner: int) -> None:
    if os.getpid() == owner:
        shutil.rmtree(path, ignore_errors=True)


def _configured_here() -> bool:
    """Whether this process's JAX (if imported) has a cache directory or has its cache off."""
    jax = sys.modules.get("jax")
    if jax is None:
        return False
    try:
        return bool(jax.config.jax_compilation_cache_dir) or not bool(
            jax.config.jax_enable_compilation_cache
        )
    except AttributeError:  # a JAX without these options: leave caching to it
        return True


def job_cache_env(
    where: str,
    extra: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The variables that point a launcher's workers at the job's compilation cache.

    Args:
      where: the caller, for the error message (``"spawn"``).
      extra: the variables the caller already gives the workers (the user's ``env``).
      environ: the environment to read (default: ``os.environ``; given, this
        process's ``jax.config`` is not consulted).

    Returns:
      ``JAX_COMPILATION_CACHE_DIR`` and, unless set, JAX's minimum compile
      time and entry size (0: every program is cached); ``{}`` when the user
      chose a cache or turned this one off.

    Raises:
      ValueError: ``TENSORPLAY_JAX_JOB_COMPILATION_CACHE`` is not 0 or 1.

    Example:
        >>> off = {"TENSORPLAY_JAX_JOB_COMPILATION_CACHE": "0"}
        >>> job_cache_env("spawn", environ=off)
        {}
        >>> sorted(job_cache_env("spawn", environ={}))  # doctest: +NORMALIZE_WHITESPACE
        ['JAX_COMPILATION_CACHE_DIR', 'JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS',
         'JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES']
    """
    env = {**(os.environ if environ is None else environ), **(extra or {})}
    switch = (settings.get_str(JOB_CACHE_ENV, env) or "").strip().lower()
    if switch not in ("0", "1"):
        raise ValueError(
            f"{where}: {JOB_CACHE_ENV}={settings.raw(JOB_CACHE_ENV, env)!r} is neither 0 nor 1; "
            "set 1 (the default: the workers share one JAX compilation cache) or 0 (off)"
        )
    enable = (settings.raw(JAX_CACHE_ENABLE_ENV, env) or "1").strip().lower()
    if (
        switch == "0"
        or settings.raw(JAX_CACHE_DIR_ENV, env)
        or enable in ("0", "false", "no", "off")
        or (environ is None and _configured_here())
    ):
        return {}
    out = {JAX_CACHE_DIR_ENV: job_cache_dir()}
    for name in (JAX_CACHE_MIN_COMPILE_S_ENV, JAX_CACHE_MIN_ENTRY_ENV):
        if settings.raw(name, env) is None:
            out[name] = "0"
    return out
