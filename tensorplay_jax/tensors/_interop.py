"""Make JAX reject Tensors clearly: a Tensor reaching a jitted ``jnp`` function raises a TypeError.

JAX 0.10 no longer calls ``__jax_array__`` when it abstractifies a jitted
function's arguments (``jnp.sin``, ``jnp.add``, ``jax.jit(f)`` ...): it raises a
generic ValueError instead. Registering the Tensor type in JAX's
type-to-aval table (private API, touched only here) turns that into a
TypeError that names ``tp.apply``. Without the private table the generic
ValueError still stops the call, so no gradient is ever lost silently.
Non-jitted paths (``jnp.asarray``, ``jnp.array``) go through
``Tensor.__jax_array__``, which raises the same TypeError for grad-requiring
Tensors.
"""

from __future__ import annotations

from typing import Any

from tensorplay_jax.tensors._tensor import _PLAIN_JNP_MSG, _RAW_JNP_MSG, Tensor


def _reject(t: Tensor) -> Any:
    if t.requires_grad:
        raise TypeError(_RAW_JNP_MSG)
    raise TypeError(_PLAIN_JNP_MSG)


def install() -> bool:
    """Register the Tensor type with JAX's abstractification; False if the table is missing."""
    try:
        from jax._src import core
    except ImportError:  # pragma: no cover - private layout changed
        return False
    table = getattr(core, "pytype_aval_mappings", None)
    if not isinstance(table, dict):  # pragma: no cover
        return False
    table[Tensor] = _reject
    return True


INSTALLED = install()
