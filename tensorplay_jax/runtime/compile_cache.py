"""JAX's persistent compilation cache as tensorplay_jax uses it: the user's and the job's.

**The user's cache.** A process that imports tensorplay_jax keeps every program
JAX compiles in a directory of the user's (:func:`configure`, run at import),
so the next run of the same script, notebook or test loads its programs from
disk instead of compiling them. The directory is
``$TENSORPLAY_JAX_CACHE_DIR``, else ``$XDG_CACHE_HOME/tensorplay_jax``, else
``~/.cache/tensorplay_jax``, with one subdirectory per jax and jaxlib version
and value of ``XLA_FLAGS`` (:func:`user_cache_dir`): an entry is never read by
another version or other flags (JAX's own key covers them too; the
subdirectory also lets a stale version's entries age out). Its size is bound by
``TENSORPLAY_JAX_COMPILATION_CACHE_MAX_MB``: a starting process removes the
least recently used entries, of every subdirectory, past the bound
(:func:`prune`; at most once an hour per directory). ``TENSORPLAY_JAX_COMPILATION_CACHE=0``
turns it off.

**The job's cache.** With the user's cache off, the workers of one
``rpc.spawn`` or ``python -m tensorplay_jax.run`` share a directory made for
the job (:func:`job_cache_dir`), removed when the launching process exits:
workers of one job run the same programs, and one worker's compile serves the
others. :func:`job_cache_env` gives a launcher's workers the variables of
whichever cache is on. ``TENSORPLAY_JAX_JOB_COMPILATION_CACHE=0`` turns the
job's cache off. Every program is cached in either (JAX's minimum compile time
is 0 unless set).

With jaxlib 0.11 and later, a process that starts JAX's multi-process runtime on
CPU runs without the cache, this one or the user's (``runtime.cross_process``: a
cross-process program loaded from it does not run).

A cache the user chose is left alone: nothing is set when
``JAX_COMPILATION_CACHE_DIR`` is set (in this environment or in the variables
given to the workers), when this process's ``jax.config`` names a directory,
or when ``JAX_ENABLE_COMPILATION_CACHE`` turns JAX's cache off.

Many processes write one directory at once (the workers of a job, several jobs
of one user). JAX's file cache (its ``LRUCache`` without a size limit, so
without a lock) writes an entry in place (truncate, then one write) and skips
a key whose file exists. Processes that compile the same program at the same
moment both miss and both write; the file ends as the last writer's compressed
entry, at most followed by the tail of a longer one, which zlib (JAX's
compressor without zstandard) ignores. A process that reads an entry while it
is being written, or while :func:`prune` removes it, gets a short stream or no
file: JAX warns ("Error reading persistent compilation cache entry") and
compiles the program itself, as it would with no cache. JAX's own size bound
is not used: it takes a lock and reads every entry's access time on each write.

Example:
    >>> env = job_cache_env("spawn", environ={"JAX_COMPILATION_CACHE_DIR": "/mine"})
    >>> env  # the user's own cache: nothing added
    {}
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.metadata
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tensorplay_jax.runtime import settings
from tensorplay_jax.runtime.settings import (
    CACHE_DIR_ENV,
    JAX_CACHE_DIR_ENV,
    JAX_CACHE_ENABLE_ENV,
    JAX_CACHE_MIN_COMPILE_S_ENV,
    JAX_CACHE_MIN_ENTRY_ENV,
    JOB_CACHE_ENV,
    USER_CACHE_ENV,
    USER_CACHE_MAX_MB_ENV,
    XDG_CACHE_ENV,
)

__all__ = [
    "configure",
    "job_cache_dir",
    "job_cache_env",
    "prune",
    "user_cache_dir",
    "user_cache_root",
]

_log = logging.getLogger(__name__)
_ENTRY_SUFFIX = "-cache"  # JAX's file cache names each entry <key>-cache
_PRUNE_MARK = ".last-pruned"
PRUNE_EVERY_S = 3600.0  # a directory is scanned for the size bound at most this often
PRUNE_TO = 0.9  # past the bound, entries go until the cache holds this share of it

_lock = threading.Lock()
_dir: str | None = None  # this process's job cache, once made
_owner: int | None = None  # the pid that made it (a forked child never removes it)


def _switch(name: str, env: Mapping[str, str], where: str) -> bool:
    value = (settings.get_str(name, env) or "").strip().lower()
    if value not in ("0", "1"):
        raise ValueError(
            f"{where}: {name}={settings.raw(name, env)!r} is neither 0 nor 1; "
            "set 1 (on, the default) or 0 (off)"
        )
    return value == "1"


def user_cache_root(environ: Mapping[str, str] | None = None) -> Path:
    """The per-user cache's folder: the setting, else the XDG cache folder's ``tensorplay_jax``.

    Example:
        >>> str(user_cache_root({"XDG_CACHE_HOME": "/c"}))
        '/c/tensorplay_jax'
        >>> str(user_cache_root({"TENSORPLAY_JAX_CACHE_DIR": "/x", "XDG_CACHE_HOME": "/c"}))
        '/x'
    """
    env = os.environ if environ is None else environ
    chosen = settings.get_str(CACHE_DIR_ENV, env)
    if chosen:
        return Path(chosen).expanduser()
    xdg = settings.get_str(XDG_CACHE_ENV, env)
    return (Path(xdg) if xdg else Path.home() / ".cache") / "tensorplay_jax"


def user_cache_dir(environ: Mapping[str, str] | None = None) -> str:
    """This process's subdirectory of the per-user cache: one per jax, jaxlib and ``XLA_FLAGS``.

    Example:
        >>> a = user_cache_dir({"XDG_CACHE_HOME": "/c"})
        >>> flags = "--xla_cpu_use_thunk_runtime=false"
        >>> b = user_cache_dir({"XDG_CACHE_HOME": "/c", "XLA_FLAGS": flags})
        >>> a.startswith("/c/tensorplay_jax/jax-") and a != b
        True
    """
    env = os.environ if environ is None else environ
    jax, jaxlib = importlib.metadata.version("jax"), importlib.metadata.version("jaxlib")
    flags = " ".join(sorted((settings.raw("XLA_FLAGS", env) or "").split()))
    digest = hashlib.sha256(flags.encode()).hexdigest()[:12]
    name = f"jax-{jax}-jaxlib-{jaxlib}-flags-{digest}"
    return str(user_cache_root(env) / name)


def _chosen_by_user(env: Mapping[str, str], here: bool) -> bool:
    """Whether the user picked a cache (a directory, or JAX's cache off): then nothing is set."""
    enable = (settings.raw(JAX_CACHE_ENABLE_ENV, env) or "1").strip().lower()
    return bool(
        settings.raw(JAX_CACHE_DIR_ENV, env)
        or enable in ("0", "false", "no", "off")
        or (here and _configured_here())
    )


def prune(root: str | os.PathLike[str], max_bytes: int) -> int:
    """Remove the least recently used entries under ``root`` until they fit in ``max_bytes``.

    An entry's last use is the later of its access and modification times
    (reading an entry refreshes its access time at least daily on a
    ``relatime`` mount). Past the bound, entries go until the rest holds
    ``PRUNE_TO`` of it. Entries another process removes meanwhile are skipped.

    Returns:
      The bytes removed.

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> for i, n in enumerate((300, 300, 300)):
        ...     p = d / "v1" / f"k{i}-cache"
        ...     p.parent.mkdir(exist_ok=True)
        ...     _ = p.write_bytes(bytes(n))
        ...     os.utime(p, (i, i))
        >>> prune(d, 700), sorted(p.name for p in (d / "v1").iterdir())
        (300, ['k1-cache', 'k2-cache'])
    """
    entries: list[tuple[float, int, str]] = []
    total = 0
    for sub in os.scandir(root):
        if not sub.is_dir(follow_symlinks=False):
            continue
        for entry in os.scandir(sub.path):
            if not entry.name.endswith(_ENTRY_SUFFIX):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            entries.append((max(st.st_atime, st.st_mtime), st.st_size, entry.path))
            total += st.st_size
    if total <= max_bytes:
        return 0
    entries.sort()
    removed = 0
    for _, size, path in entries:
        if total - removed <= max_bytes * PRUNE_TO:
            break
        try:
            os.unlink(path)
        except FileNotFoundError:
            continue
        removed += size
    return removed


def _prune_if_due(root: Path, max_bytes: int) -> None:
    mark = root / _PRUNE_MARK
    try:
        if time.time() - mark.stat().st_mtime < PRUNE_EVERY_S:
            return
    except FileNotFoundError:
        pass
    mark.touch()  # first: processes starting together scan once, not each
    freed = prune(root, max_bytes)
    if freed:
        _log.info("compilation cache %s: removed %d bytes of its oldest entries", root, freed)


def configure(environ: Mapping[str, str] | None = None) -> str | None:
    """Point this process's JAX at the per-user cache, unless it is off or the user chose one.

    Sets ``jax_compilation_cache_dir`` to :func:`user_cache_dir` and, unless the
    environment sets it, JAX's minimum compile time to 0 (every program is
    cached), then prunes the cache to its bound when due. A folder that cannot
    be made leaves JAX uncached (logged, not raised: a cache is never a reason
    to fail). Programs JAX compiled before this ran were not cached.

    Returns:
      The directory now in use, or None when this left JAX alone.

    Raises:
      ValueError: ``TENSORPLAY_JAX_COMPILATION_CACHE`` is not 0 or 1, or the size bound is not
        a positive number of MiB.

    Example:
        >>> configure({"TENSORPLAY_JAX_COMPILATION_CACHE": "0"}) is None
        True
    """
    env = os.environ if environ is None else environ
    on = _switch(USER_CACHE_ENV, env, "tensorplay_jax")
    try:
        max_mb = settings.get_int(USER_CACHE_MAX_MB_ENV, env)
    except ValueError:
        max_mb = None
    if max_mb is None or max_mb <= 0:
        raise ValueError(
            f"{USER_CACHE_MAX_MB_ENV}={settings.raw(USER_CACHE_MAX_MB_ENV, env)!r}: "
            "the cache's size bound must be a positive number of MiB"
        )
    if not on or _chosen_by_user(env, here=True):
        return None
    path = user_cache_dir(env)
    try:
        os.makedirs(path, exist_ok=True)
        _prune_if_due(Path(path).parent, max_mb << 20)
    except OSError as err:
        _log.info("compilation cache %s not used: %s", path, err)
        return None
    import jax

    jax.config.update("jax_compilation_cache_dir", path)
    if settings.raw(JAX_CACHE_MIN_COMPILE_S_ENV, env) is None:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    return path


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


_UNKNOWN = object()  # a JAX without the cache options: caching is left to it


def _jax_cache() -> Any:
    """This process's JAX cache setting: None (JAX not imported), False (off), the
    directory (``""`` when none), or ``_UNKNOWN``."""
    jax = sys.modules.get("jax")
    if jax is None:
        return None
    try:
        if not jax.config.jax_enable_compilation_cache:
            return False
        return jax.config.jax_compilation_cache_dir or ""
    except AttributeError:
        return _UNKNOWN


def _configured_here() -> bool:
    """Whether this process's JAX (if imported) has a cache directory or has its cache off."""
    setting = _jax_cache()
    return setting is not None and setting != ""


def _configured_by(path: str) -> bool:
    """Whether this process's JAX caches in ``path`` (as :func:`configure` set it)."""
    return _jax_cache() == path


def job_cache_env(
    where: str,
    extra: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The variables that point a launcher's workers at the cache that is on.

    The per-user cache when it is on (the directory this process uses, or the
    one the workers' variables name), else the job's.

    Args:
      where: the caller, for the error message (``"spawn"``).
      extra: the variables the caller already gives the workers (the user's ``env``).
      environ: the environment to read (default: ``os.environ``; given, this
        process's ``jax.config`` is not consulted).

    Returns:
      ``JAX_COMPILATION_CACHE_DIR`` and, unless set, JAX's minimum compile
      time and entry size (0: every program is cached); ``{}`` when the user
      chose a cache or turned both off.

    Raises:
      ValueError: a switch is not 0 or 1.

    Example:
        >>> off = {"TENSORPLAY_JAX_JOB_COMPILATION_CACHE": "0",
        ...        "TENSORPLAY_JAX_COMPILATION_CACHE": "0"}
        >>> job_cache_env("spawn", environ=off)
        {}
        >>> job_only = {"TENSORPLAY_JAX_COMPILATION_CACHE": "0"}
        >>> sorted(job_cache_env("spawn", environ=job_only))  # doctest: +NORMALIZE_WHITESPACE
        ['JAX_COMPILATION_CACHE_DIR', 'JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS',
         'JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES']
    """
    here = environ is None
    env = {**(os.environ if here else environ), **(extra or {})}
    user = _switch(USER_CACHE_ENV, env, where)
    job = _switch(JOB_CACHE_ENV, env, where)
    path = user_cache_dir(env) if user else None
    if not (here and path and _configured_by(path)) and _chosen_by_user(env, here):
        return {}  # the user's own choice (or this process's configure() left JAX alone)
    if path:
        try:
            os.makedirs(path, exist_ok=True)
        except OSError:
            path = None
    if path is None and not job:
        return {}
    out = {JAX_CACHE_DIR_ENV: path or job_cache_dir()}
    for name in (JAX_CACHE_MIN_COMPILE_S_ENV, JAX_CACHE_MIN_ENTRY_ENV):
        if settings.raw(name, env) is None:
            out[name] = "0"
    return out
