"""The shared base layer: settings, the job secret, ids, device placement, launch and rendezvous.

Every other folder of ``tensorplay_jax`` may import these modules; this folder
imports no other folder of the package. Its modules are an internal API for the
sibling folders (their names are public so that any folder may import them);
the user-facing parts are the settings table (:data:`settings.SETTINGS`, from which
the documentation's "Configuration" page is generated) and the environment variables
it lists.

- ``settings``: timeouts, sizes and defaults, and every environment variable read.
- ``secret``: the job secret and the challenge built on it.
- ``ids``: job-unique ids (rank above a serial), packed and unpacked in one place.
- ``device``: host arrays to ``jax.Array`` (``jax.device_put``), aligned host buffers,
  device names and ``tp.device``.
- ``accelerator``, ``cuda``: ``tp.accelerator`` and ``tp.cuda`` (what devices are here).
- ``pickling``: cloudpickle keeping code file names (remote tracebacks show user lines).
- ``init_method``: ``env://`` / ``tcp://`` / ``file://``, RANK, WORLD_SIZE, SLURM, a world of one.
- ``file_store``: a key-value store in one locked file (what ``file://`` meets in).
- ``launch``: local worker processes (``python -m tensorplay_jax.run``, ``rpc.spawn``).
- ``compile_cache``: JAX's compilation cache: the per-user folder, and the one a job shares.
- ``cross_process``: the settings under which the ranks of a CPU job compile a program alike.
- ``pending``: the boundary at which a thread's deferred work runs (a served RPC call's end).
- ``trace``: the profiler's recorder (a flag, an event buffer, spans); ``tensorplay_jax.profiler``.

Example:
    >>> from tensorplay_jax.runtime import settings
    >>> settings.DEFAULT_RPC_TIMEOUT_S
    60.0
"""

import importlib

__all__ = [
    "accelerator",
    "compile_cache",
    "cross_process",
    "cuda",
    "device",
    "file_store",
    "ids",
    "init_method",
    "launch",
    "pending",
    "pickling",
    "secret",
    "settings",
    "trace",
]


def __getattr__(name: str):
    # Modules load on first use, so the launcher and settings readers do not import JAX.
    if name in __all__:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
