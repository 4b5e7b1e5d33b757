"""``tp.save`` / ``tp.load``: Tensors, state dicts and nested containers to a file and back.

The format is a plain Python pickle stream (not torch's zip archive): a
Tensor pickles as its value as a NumPy array, its class (``Tensor``,
``nn.Parameter``) and its ``requires_grad`` flag (``Tensor.__reduce__``; the
graph and ``.grad`` stay behind), and a bare ``jax.Array`` as a NumPy array that
loads back as a ``jax.Array``. A pickle stream needs no extra dependency,
carries any container (dicts, ``OrderedDict`` state dicts, lists, tuples,
whole modules) and NumPy reads the arrays without copies.

``load`` defaults to ``weights_only=True``, as torch does: only Tensors,
NumPy arrays, numbers, strings and the builtin containers are unpickled, so a
file cannot run code. ``weights_only=False`` unpickles anything (whole
modules, your own classes) and, like any pickle and like torch's
``weights_only=False``, is unsafe on a file you do not trust: it can run
arbitrary code.

Example:
    >>> import io
    >>> import tensorplay_jax as tp
    >>> buf = io.BytesIO()
    >>> tp.save({"w": tp.ones(2), "step": 3}, buf)
    >>> _ = buf.seek(0)
    >>> tp.load(buf)
    {'w': tensor([1., 1.]), 'step': 3}
"""

from __future__ import annotations

import io
import os
import pickle
from collections.abc import Callable
from typing import IO, Any

import jax
import jax.numpy as jnp
import numpy as np

from tensorplay_jax.tensors._device import place
from tensorplay_jax.tensors._host import from_host
from tensorplay_jax.tensors._tensor import Tensor, _rebuild

__all__ = ["load", "save"]

DEFAULT_PROTOCOL = pickle.HIGHEST_PROTOCOL
FileLike = str | os.PathLike | IO[bytes]


def _jax_array(value: np.ndarray) -> jax.Array:
    """A saved bare ``jax.Array``, back on the default device."""
    return jnp.asarray(value)


class _Pickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, jax.Array) and not isinstance(obj, jax.core.Tracer):
            return (_jax_array, (np.asarray(obj),))
        return NotImplemented


def save(
    obj: Any, f: FileLike, pickle_module: Any = None, pickle_protocol: int = DEFAULT_PROTOCOL
) -> None:
    """Write ``obj`` (Tensors, state dicts, nested containers, modules) to ``f``.

    Args:
        obj: what to save. Tensors keep their values, classes and
            ``requires_grad`` (not their graph or ``.grad``).
        f: a file path or a binary file-like object open for writing.
        pickle_module: accepted for torch's call; only ``pickle`` (or None) is supported.
        pickle_protocol: the pickle protocol.

    Raises:
        ValueError: ``pickle_module`` is not ``pickle``.
    """
    if pickle_module not in (None, pickle):
        raise ValueError("tp.save: only the standard pickle module is supported (pickle_module=)")
    if isinstance(f, str | os.PathLike):
        with open(f, "wb") as fh:
            _Pickler(fh, protocol=pickle_protocol).dump(obj)
    else:
        _Pickler(f, protocol=pickle_protocol).dump(obj)


# What a weights-only load may unpickle: (module, name) of plain data and its containers.
_SAFE: set[tuple[str, str]] = {
    *(("builtins", n) for n in ("dict", "list", "tuple", "set", "frozenset", "int", "float")),
    *(("builtins", n) for n in ("complex", "bool", "str", "bytes", "bytearray", "slice")),
    ("collections", "OrderedDict"),
    *(
        (f"numpy.{core}.{mod}", name)
        for core in ("core", "_core")
        for mod, name in (
            ("multiarray", "_reconstruct"),
            ("multiarray", "scalar"),
            ("numeric", "_frombuffer"),
        )
    ),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
}


def _moved(loc: Any, inner: Callable[..., Any]) -> Callable[..., Any]:
    """``inner`` (a Tensor rebuild), with the value placed on ``loc``."""

    def rebuild(cls: type[Tensor], value: np.ndarray, requires_grad: bool) -> Tensor:
        t = cls.__new__(cls)
        Tensor.__init__(t, place(from_host(value), loc, "tp.load"), requires_grad=requires_grad)
        return t

    return rebuild


class _Unpickler(pickle.Unpickler):
    def __init__(self, f: IO[bytes], weights_only: bool, loc: Any) -> None:
        super().__init__(f)
        self.weights_only = weights_only
        self.loc = loc

    def find_class(self, module: str, name: str) -> Any:
        if module.startswith("numpy.dtypes") and name.endswith("DType"):
            return super().find_class(module, name)  # NumPy 2's dtype classes
        obj = None
        if (module, name) in _SAFE or not self.weights_only:
            obj = super().find_class(module, name)
        elif module.startswith("tensorplay_jax."):
            found = super().find_class(module, name)
            if (
                found is _rebuild
                or found is _jax_array
                or (isinstance(found, type) and issubclass(found, Tensor))
            ):
                obj = found
        if obj is None:
            raise pickle.UnpicklingError(
                f"Weights only load failed: Unsupported global: GLOBAL {module}.{name} is not "
                "an allowed global (only Tensors, NumPy arrays, numbers, strings and builtin "
                "containers load with weights_only=True). If you trust the file, pass "
                "weights_only=False: that unpickles anything and can run arbitrary code."
            )
        if obj is _rebuild and self.loc is not None:
            return _moved(self.loc, obj)
        return obj


def _location(map_location: Any) -> Any:
    """The device that ``map_location`` names (None: leave tensors on the default device)."""
    if map_location is None or isinstance(map_location, dict) or callable(map_location):
        return None  # no device is stored with a Tensor: nothing to remap
    return map_location


def load(
    f: FileLike,
    map_location: Any = None,
    pickle_module: Any = None,
    *,
    weights_only: bool = True,
    mmap: bool | None = None,
    **pickle_load_args: Any,
) -> Any:
    """Read what ``save`` wrote.

    Args:
        f: a file path or a binary file-like object open for reading.
        map_location: a device (``"cpu"``, ``"cuda:0"``, ``tp.device``, a
            ``jax.Device``) to put every loaded Tensor on; a dict or a callable
            is accepted and changes nothing (no device is saved with a Tensor;
            without it Tensors load onto JAX's default device).
        pickle_module: accepted for torch's call; only ``pickle`` (or None).
        weights_only: only unpickle Tensors, arrays, numbers, strings and
            builtin containers (the default, safe on untrusted files); False
            unpickles anything, which can run arbitrary code: only for files you trust.
        mmap: accepted for torch's call and ignored.
        pickle_load_args: accepted for torch's call (``encoding=``) and ignored.

    Raises:
        pickle.UnpicklingError: with ``weights_only``, the file holds another
            type; or the file is not a pickle stream.
        RuntimeError: the file is torch's zip format.
    """
    if pickle_module not in (None, pickle):
        raise ValueError("tp.load: only the standard pickle module is supported (pickle_module=)")
    if isinstance(f, str | os.PathLike):
        with open(f, "rb") as fh:
            return _load(fh, weights_only, _location(map_location))
    return _load(f, weights_only, _location(map_location))


def _load(f: IO[bytes], weights_only: bool, loc: Any) -> Any:
    seekable = getattr(f, "seekable", lambda: False)()
    start = f.tell() if seekable else 0
    head = f.read(4)
    if head == b"PK\x03\x04":
        raise RuntimeError(
            "tp.load: this is a torch.save archive (zip), not a tensorplay_jax.save file; "
            "load it with torch and convert the Tensors (tp.tensor(t.numpy()))"
        )
    if seekable:
        f.seek(start)
        stream = f
    else:
        stream = io.BytesIO(head + f.read())
    return _Unpickler(stream, weights_only, loc).load()
