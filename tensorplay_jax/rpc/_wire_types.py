"""The wire format's type registry: which classes travel as registered records.

:func:`register_type` teaches the codec (``_codec``) a class; the codec looks an
encoder up by type (:func:`lookup`, subclasses included when asked) and a decoder
by its stable wire name (:func:`registered`). :func:`current_peer` names the worker
whose bytes a registered decoder is reading. :class:`DecodeError` is the one error
the wire format raises for bytes it cannot decode.

Extension hook for other packages::

    register_type(Tensor, encode=lambda t: (t.data, t.requires_grad),
                  decode=lambda v: Tensor(v[0], requires_grad=v[1]))

``encode`` returns any value this codec can encode (arrays inside it still
travel out of band); ``decode`` receives that value back on the other side.
A type that is one array plus a little metadata (a Tensor) registers with
``array=True``: ``encode`` returns ``(array, extra)`` with ``extra`` a plain
msgpack value (None, bool, int, float, str, or lists of them), and the pair
travels as one compact record; ``decode`` gets the array as NumPy, on the
received bytes.
Types are matched by a stable name (``module.qualname`` by default), so two
processes need not register in the same order. RRef, WorkerInfo and exceptions
use this same registry. While a registered decoder runs, :func:`current_peer`
names the worker the bytes came from.
"""

from __future__ import annotations

import contextvars
import dataclasses
from collections.abc import Callable
from typing import Any


class DecodeError(RuntimeError, ValueError):
    """Bytes that are not a valid message of this wire format, or that name what is not here.

    A ``RuntimeError``, as tensorplay's errors reading a message are, and a
    ``ValueError``.
    """


@dataclasses.dataclass(frozen=True)
class _Entry:
    name: str
    cls: type
    encode: Callable[[Any], Any]
    decode: Callable[[Any], Any]
    subclasses: bool
    array: bool = False


_by_type: dict[type, _Entry | None] = {}
_by_name: dict[str, _Entry] = {}
_subclass_entries: list[_Entry] = []


def register_type(
    cls: type,
    encode: Callable[[Any], Any],
    decode: Callable[[Any], Any],
    *,
    name: str | None = None,
    subclasses: bool = False,
    array: bool = False,
) -> None:
    """Teach the RPC wire format to carry instances of ``cls``.

    Args:
      cls: the class to register.
      encode: maps an instance to a value the codec can already encode
        (arrays, containers, other registered types ...).
      decode: maps that value back to an instance on the receiving worker.
      name: the stable wire name; ``module.qualname`` of ``cls`` by default.
        Both sides must register the same name.
      subclasses: also use this entry for subclasses of ``cls`` that have no
        entry of their own.
      array: ``encode`` returns ``(array, extra)`` (a numpy or JAX array, and a
        plain msgpack value); they travel as one compact record and ``decode``
        gets ``(array, extra)`` back, the array as a NumPy array on the
        received bytes (read-only when the message was small): the decoder
        decides where it goes (e.g. ``jax.device_put``).

    Raises:
      ValueError: ``name`` is already registered for a different class.

    Example:
      >>> import dataclasses
      >>> from tensorplay_jax.rpc import _codec
      >>> class Celsius:
      ...     def __init__(self, deg): self.deg = deg
      >>> _codec.register_type(Celsius, lambda c: c.deg, Celsius, name="doc.Celsius")
      >>> _codec.decode(_codec.encode(Celsius(21.5))).deg
      21.5
    """
    key = name or f"{cls.__module__}.{cls.__qualname__}"
    old = _by_name.get(key)
    if old is not None and old.cls is not cls:
        raise ValueError(
            f"register_type: name {key!r} is already registered for {old.cls!r}; "
            f"pass a different name= for {cls!r}"
        )
    entry = _Entry(key, cls, encode, decode, subclasses, array)
    _by_name[key] = entry
    if subclasses:
        _subclass_entries[:] = [e for e in _subclass_entries if e.cls is not cls] + [entry]
    # A fresh table (swapped in whole, so a concurrent lookup never sees it half built)
    # keeps every exact registration and forgets cached subclass answers.
    fresh: dict[type, _Entry | None] = {e.cls: e for e in _by_name.values()}
    fresh[cls] = entry
    _swap_table(fresh)


def _swap_table(table: dict[type, _Entry | None]) -> None:
    global _by_type
    _by_type = table


def lookup(t: type) -> _Entry | None:
    table = _by_type
    try:
        return table[t]
    except KeyError:
        pass
    entry = None
    for e in _subclass_entries:
        if issubclass(t, e.cls):
            entry = e
            break
    table[t] = entry
    return entry


# ---------------------------------------------------------------------------
# Decode context: which peer the bytes came from.

peer: contextvars.ContextVar[Any] = contextvars.ContextVar("tpj_rpc_decode_peer", default=None)


def current_peer() -> Any:
    """The peer (a WorkerInfo) whose message is being decoded, or None."""
    return peer.get()


# Encode context: which worker the message goes to (an RRef records it as its fork's holder).
destination: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "tpj_rpc_encode_to", default=None
)


def encoding_to() -> str | None:
    """The name of the worker the message being encoded goes to, or None (not known)."""
    return destination.get()


def registered(name: str) -> _Entry:
    entry = _by_name.get(name)
    if entry is None:
        raise DecodeError(
            f"no decoder registered for wire type {name!r} on this worker; "
            "import the module that calls register_type for it"
        )
    return entry
