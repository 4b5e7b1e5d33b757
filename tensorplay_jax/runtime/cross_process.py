"""Settings under which every rank compiles a cross-process CPU program to one executable.

From jaxlib 0.11 on, a CPU program whose devices belong to several processes
runs only when every process executes the same executable, as its fingerprint
tells; ranks whose executables differ each wait in the program's first
collective for the others' data until gloo's timeout. (jaxlib 0.10.2 runs
them; 0.12.1 hangs; 0.11 could not be checked here.) Two things make them
differ, and a process that starts JAX's multi-process runtime on CPU
(``init_process_group`` with gloo) turns both off before it compiles anything
(:func:`apply`):

- **The caller's stack.** JAX records the Python frames that led to a program's
  trace in its locations (``jax_traceback_in_locations_limit`` frames), so a
  ``send`` and the matching ``recv``, reached through different functions,
  compile to different executables. The limit is set to 0.
- **JAX's persistent cache.** An executable loaded from the cache differs from
  the one compiled, and whether a rank loads or compiles depends on what its
  cache holds. The cache is turned off: JAX decides once per process, at its
  first compile, whether it uses it, so there is no switch per program.

Both settings are the process's, so the user's own cross-process programs, which
need the same to run, get them too; single-process programs of that process lose
their source locations in profiles and dumps and compile in each run. A script
that calls ``jax.distributed.initialize`` itself on CPU calls :func:`apply` right
after it (``docs/porting.md``, "Compilation: first steps and new shapes").

Example:
    >>> import jax
    >>> jax.distributed.initialize(address, num_processes, process_id)  # doctest: +SKIP
    >>> from tensorplay_jax.runtime import cross_process
    >>> cross_process.apply()  # doctest: +SKIP
"""

from __future__ import annotations

import logging

import jax
import jaxlib.version

__all__ = ["apply", "needed"]

_log = logging.getLogger(__name__)
_SAME_EXECUTABLE_NEEDED_FROM = (0, 11)  # jaxlib release first taken to need it


def needed(release: tuple[int, ...] | None = None) -> bool:
    """Whether this jaxlib (or a jaxlib of ``release``) runs a cross-process CPU program
    only when every rank has the same executable.

    Example:
        >>> needed((0, 10, 2)), needed((0, 12, 1))
        (False, True)
    """
    release = jaxlib.version.__version_info__ if release is None else release
    return tuple(release[:2]) >= _SAME_EXECUTABLE_NEEDED_FROM


def apply() -> None:
    """Set this process's JAX so that its ranks compile each program to one executable,
    where this jaxlib needs it (:func:`needed`); call before JAX compiles anything."""
    if not needed():
        return
    jax.config.update("jax_traceback_in_locations_limit", 0)
    if jax.config.jax_enable_compilation_cache:
        jax.config.update("jax_enable_compilation_cache", False)
        _log.info(
            "JAX's persistent compilation cache is off in this process: with jaxlib %s, a "
            "cross-process CPU program loaded from it does not run",
            jaxlib.version.__version__,
        )
