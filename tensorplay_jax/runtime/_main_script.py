"""``spawn``'s workers import the parent's main script first, as ``__mp_main__`` (as torch's do).

``torch.multiprocessing.spawn`` starts each worker with Python's ``spawn``
start method, which imports the parent's main script under the name
``__mp_main__`` (so its ``if __name__ == "__main__":`` block does not run),
with the parent's ``sys.argv`` and ``sys.path``, before it unpickles the
function. Module-level code therefore runs in every worker (a
``tp.manual_seed(543)`` at the top seeds each of them), and the function,
found by name in that module, runs with the module's globals, classes and
state. :data:`BOOT` is the worker's side of that, :func:`main_script` the
parent's, :class:`MainByName` the pickler that sends the main script's
functions and classes by name (by value where the worker's main has no such
name, e.g. one defined under the ``__main__`` guard). The worker imports
nothing of this package before the script: a script that sets ``XLA_FLAGS``
or ``JAX_PLATFORMS`` before it imports JAX keeps that working.

Example:
    >>> sorted(main_script())
    ['argv', 'file', 'module', 'path']
"""

from __future__ import annotations

import os
import sys
import types
from typing import Any

from tensorplay_jax.runtime.pickling import Pickler, dumps, loads

__all__ = ["BOOT", "BOOTING", "MainByName", "check_not_importing_main", "main_attr", "main_script"]

# Set in the worker's own ``__main__`` (the boot code's globals) while it imports the script.
BOOTING = "_tensorplay_jax_spawn_importing_main"

# The worker: argv = [-c, blob, rank]. The blob holds main_script()'s dict, then (fn, args).
BOOT = f"""
import pickle, runpy, sys, types
blob, rank = sys.argv[1], int(sys.argv[2])
with open(blob, "rb") as f:
    main = pickle.load(f)
    sys.path[:], sys.argv[:] = main["path"], main["argv"]
    if main["module"] or main["file"]:
        {BOOTING} = True
        if main["module"]:
            g = runpy.run_module(main["module"], run_name="__mp_main__", alter_sys=True)
        else:
            g = runpy.run_path(main["file"], run_name="__mp_main__")
        m = types.ModuleType("__mp_main__")
        m.__dict__.update(g)
        sys.modules["__main__"] = sys.modules["__mp_main__"] = m
    import cloudpickle
    fn, args = cloudpickle.load(f)
result = fn(rank, *args)
with open(blob + f".{{rank}}.out", "wb") as f:
    cloudpickle.dump(result, f)
"""


def main_script() -> dict[str, Any]:
    """How a worker imports this process's main script (none: a notebook, a REPL, ``-c``).

    ``module`` (run with ``python -m``) or ``file`` (run as ``python path``),
    and the ``path`` and ``argv`` the worker takes over, as multiprocessing's
    spawn prepares its children. A package's ``__main__`` is not re-run, nor
    is IPython's launcher, as there.
    """
    main = sys.modules.get("__main__")
    spec_name = getattr(getattr(main, "__spec__", None), "name", None)
    module = file = None
    if spec_name is not None:
        if spec_name != "__main__" and not spec_name.endswith(".__main__"):
            module = spec_name
    else:
        path = getattr(main, "__file__", None)
        ipython = isinstance(path, str) and os.path.basename(path).startswith("ipython")
        if isinstance(path, str) and os.path.isfile(path) and not ipython:
            file = os.path.abspath(path)
    here = os.getcwd()
    return {
        "module": module,
        "file": file,
        "path": [here if p == "" else p for p in sys.path],
        "argv": list(sys.argv),
    }


def main_attr(qualname: str, by_value: bytes) -> Any:
    """``qualname`` in this process's main script, else ``by_value`` unpickled.

    Example:
        >>> main_attr("no_such_name", dumps(len)) is len
        True
    """
    obj: Any = sys.modules["__main__"]
    try:
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except AttributeError:
        return loads(by_value)
    return obj


def _main_qualname(obj: Any) -> str | None:
    """The qualname under which ``obj`` (a function or class) is itself in ``__main__``."""
    if not isinstance(obj, types.FunctionType | type) or obj.__module__ != "__main__":
        return None
    qualname = obj.__qualname__
    target: Any = sys.modules["__main__"]
    try:
        for part in qualname.split("."):
            target = getattr(target, part)
    except AttributeError:
        return None
    return qualname if target is obj else None


class MainByName(Pickler):
    """A :class:`~tensorplay_jax.runtime.pickling.Pickler` sending main-script objects by name.

    For workers that import the main script first (:data:`BOOT`); each such
    function or class also carries its by-value pickle, used where the
    worker's main has no such name.
    """

    def reducer_override(self, obj: Any) -> Any:
        name = _main_qualname(obj)
        if name is not None:
            return main_attr, (name, dumps(obj))
        return super().reducer_override(obj)


def check_not_importing_main(what: str) -> None:
    """Refuse to start workers from a worker that is still importing the main script.

    Raises:
        RuntimeError: called at the top level of a script a worker imports (the
            script starts workers outside ``if __name__ == "__main__":``).

    Example:
        >>> check_not_importing_main("spawn")  # this process is not a booting worker
    """
    if getattr(sys.modules.get("__main__"), BOOTING, False):
        raise RuntimeError(
            f"{what}: called while a spawned worker imports the main script: the script "
            "starts workers at its top level, so every worker would start more. Put the "
            "call under `if __name__ == '__main__':`, as torch.multiprocessing requires"
        )
