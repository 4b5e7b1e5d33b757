"""Leaving a compiled program for Python: ``buffer_callback`` on CPU, ``pure_callback`` elsewhere.

``differentiable_rpc`` under ``jax.jit``/``jax.vmap`` sends its message from a
host callback. :func:`host_call` runs ``run`` there and puts its results in
XLA's own output buffers: on CPU through
``jax.experimental.buffer_callback``, which hands the callback XLA's input
and output buffers, so a result received from the wire is copied once into
the output instead of going through ``jax.device_put`` as a
``jax.pure_callback`` result does. On other platforms (whose buffers live on
the accelerator), and with a JAX that lacks ``buffer_callback``, it is
``jax.pure_callback``. ``jax.lax.platform_dependent`` picks the branch when
the program is lowered, so one traced function serves every platform.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

try:
    from jax.experimental.buffer_callback import buffer_callback
except ImportError:  # a JAX without it: pure_callback everywhere
    buffer_callback = None

__all__ = ["host_call"]


def host_call(
    run: Callable[..., Sequence[Any]],
    specs: Sequence[jax.ShapeDtypeStruct],
    *args: Any,
    vmap_method: str,
) -> list[jax.Array]:
    """``run(*args)`` from inside a staged computation, as ``jax.pure_callback`` would.

    ``run`` takes NumPy arrays (read-only views of XLA's buffers: valid only
    during the call) and returns one array per spec, of exactly its shape
    and dtype (with the leading ``vmap`` dimensions in front).

    Args:
        run: the host function.
        specs: the results' shapes and dtypes.
        *args: its array arguments.
        vmap_method: as for ``jax.pure_callback``.

    Returns:
        The results, as a list of arrays.

    Raises:
        ValueError: ``run`` returned a result whose shape or dtype is not its spec's.

    Example:
        >>> import jax.numpy as jnp
        >>> twice = lambda x: [x * 2]
        >>> spec = [jax.ShapeDtypeStruct((2,), jnp.float32)]
        >>> jax.jit(lambda x: host_call(twice, spec, x, vmap_method="sequential"))(jnp.ones(2))
        [Array([2., 2.], dtype=float32)]
    """
    specs = list(specs)

    def fill(ctx: Any, outs: list[Any], *ins: Any) -> None:
        views = []
        for a in ins:
            views.append(np.asarray(a))
            views[-1].flags.writeable = False  # XLA's input buffer
        res = run(*views)
        for o, r in zip(outs, res, strict=True):
            out = np.asarray(o)
            r = np.asarray(r)
            if r.shape != out.shape or r.dtype != out.dtype:
                raise ValueError(
                    f"host callback: a result has shape {r.shape} and dtype {r.dtype}, but "
                    f"its output is declared {out.shape} {out.dtype}"
                )
            out[...] = r

    def on_cpu(*a: Any) -> list[jax.Array]:
        return buffer_callback(fill, specs, vmap_method=vmap_method)(*a)

    def elsewhere(*a: Any) -> list[jax.Array]:
        return jax.pure_callback(run, specs, *a, vmap_method=vmap_method)

    if buffer_callback is None:
        return elsewhere(*args)
    return list(jax.lax.platform_dependent(*args, cpu=on_cpu, default=elsewhere))
