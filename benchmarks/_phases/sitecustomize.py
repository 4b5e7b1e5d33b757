"""Where a short program's seconds go, per process (``benchmarks/tutorials.py --breakdown``).

``tutorials.py`` puts this folder first on ``PYTHONPATH`` and names an output
folder in ``TPJ_PHASES_DIR``; Python then runs this module at start-up in
every process of the program (torch's or ours). It writes, at the process's
exit, one JSON file of seconds:

- ``start``: from the process's start (``/proc/self/stat``) to this module;
- ``import``: importing the library (``tensorplay_jax`` or ``torch``), first import to
  its end, measured around the import by a ``sys.meta_path`` finder;
- ``init_rpc`` and ``shutdown``: the calls of the program's ``rpc`` module;
- ``trace``, ``lower``, ``compile``, ``cache_load``: JAX's own durations of
  tracing to a jaxpr, lowering to MLIR, XLA compilation and reading the
  persistent cache (``jax.monitoring``; they can overlap across threads);
- ``total``: from the process's start to its exit.

What is left (``total`` less the rest) is the program's own work: its steps,
the tape and our host evaluation on our side.
"""

from __future__ import annotations

import atexit
import importlib.machinery
import json
import os
import sys
import time

_OUT = os.environ.get("TPJ_PHASES_DIR")
_LIBS = ("tensorplay_jax", "torch")
_JAX_EVENTS = {
    "/jax/core/compile/jaxpr_trace_duration": "trace",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
    "/jax/core/compile/backend_compile_duration": "compile",
    "/jax/compilation_cache/cache_retrieval_time_sec": "cache_load",
}


def _process_start() -> float:
    """The wall-clock time this process started (Linux), else now."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return time.time() - uptime + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return time.time()


class _Phases:
    def __init__(self) -> None:
        self.t0 = _process_start()
        self.seconds: dict[str, float] = {"start": time.time() - self.t0}
        self.lib: str | None = None
        self.patched: set[str] = set()

    def add(self, key: str, seconds: float) -> None:
        self.seconds[key] = self.seconds.get(key, 0.0) + seconds

    def timed(self, key: str, fn):
        def wrapper(*args, **kwargs):
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.add(key, time.perf_counter() - t)

        wrapper.__wrapped__ = fn
        return wrapper

    def write(self) -> None:
        if not self.lib:
            return  # a helper process that imported neither library
        self.seconds["total"] = time.time() - self.t0
        path = os.path.join(_OUT, f"{self.lib}-{os.getpid()}.json")
        with open(path, "w") as f:
            json.dump({"lib": self.lib, "argv": sys.argv, "seconds": self.seconds}, f)


class _Finder:
    """Times the first import of each library and wraps its rpc module's init and shutdown."""

    def __init__(self, phases: _Phases) -> None:
        self.phases = phases

    def find_spec(self, name, path=None, target=None):
        if name not in _LIBS or self.phases.lib is not None:
            return None
        self.phases.lib = name
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module  # this module's own loader: wrapping it touches nothing else

        def exec_module(module) -> None:
            t = time.perf_counter()
            try:
                run(module)
            finally:
                self.phases.add("import", time.perf_counter() - t)
                self._hook()

        spec.loader.exec_module = exec_module
        return spec

    def _hook(self) -> None:
        for mod_name in ("tensorplay_jax.rpc", "torch.distributed.rpc"):
            mod = sys.modules.get(mod_name)
            if mod is None:
                try:
                    mod = __import__(mod_name, fromlist=["_"])
                except Exception:
                    continue
            if mod_name in self.phases.patched:
                continue
            self.phases.patched.add(mod_name)
            for fn, key in (("init_rpc", "init_rpc"), ("shutdown", "shutdown")):
                if hasattr(mod, fn):
                    setattr(mod, fn, self.phases.timed(key, getattr(mod, fn)))
        jax = sys.modules.get("jax")
        if jax is not None and "jax" not in self.phases.patched:
            self.phases.patched.add("jax")

            def on_duration(event: str, seconds: float, **_: object) -> None:
                key = _JAX_EVENTS.get(event)
                if key:
                    self.phases.add(key, seconds)

            jax.monitoring.register_event_duration_secs_listener(on_duration)


if _OUT:
    _phases = _Phases()
    sys.meta_path.insert(0, _Finder(_phases))
    atexit.register(_phases.write)
