"""The bridge to plain JAX: parameters as a pytree, and ``functional_call`` inside jit/grad."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from tensorplay_jax.autograd import no_grad
from tensorplay_jax.nn._module import Module, _overlay
from tensorplay_jax.tensors import Tensor, key_scope


def _is_tensor(x: Any) -> bool:
    return isinstance(x, Tensor)


def get_parameters(module: Module, *, buffers: bool = False) -> dict[str, jax.Array]:
    """The module's parameters (and buffers, if asked) as ``{dotted_name: jax.Array}``.

    The dict is a pytree: hand it to ``jax.grad``, ``optax`` and
    ``functional_call``; write trained values back with ``module.load_state_dict(params)``.

    Example:
        >>> import tensorplay_jax as tp
        >>> sorted(tp.nn.get_parameters(tp.nn.Linear(2, 3)))
        ['bias', 'weight']
    """
    out = {name: p.value for name, p in module.named_parameters()}
    if buffers:
        out.update({name: b.value for name, b in module.named_buffers()})
    return out


def _owners(module: Module) -> dict[str, tuple[Module, str]]:
    owners: dict[str, tuple[Module, str]] = {}
    for prefix, mod in module.named_modules():
        for store in (mod._parameters, mod._buffers):
            for name in store:
                owners.setdefault(f"{prefix}.{name}" if prefix else name, (mod, name))
    return owners


def _to_tensor(x: Any) -> Any:
    if isinstance(x, Tensor):
        return x
    if isinstance(x, jax.Array | np.ndarray):
        return Tensor._wrap(x) if isinstance(x, jax.Array) else Tensor(x)
    return x


def functional_call(
    module: Module,
    params: Mapping[str, Any],
    *args: Any,
    rng: jax.Array | None = None,
    strict: bool = False,
    **kwargs: Any,
) -> Any:
    """Call ``module(*args, **kwargs)`` with ``params`` in place of its own; return arrays.

    Works inside ``jax.grad``, ``jax.jit``, ``jax.vmap``: the values in
    ``params`` may be tracers, the module is not modified (the substitution is
    an overlay seen only by this thread during the call), and nothing is
    recorded on the tape. Array arguments are wrapped as Tensors for
    ``forward``; Tensors in the output come back as ``jax.Array`` s.

    Args:
        module: the module to run.
        params: ``{dotted_name: array}`` as from ``get_parameters``; names not
            given keep the module's own values.
        *args: positional arguments of ``forward`` (arrays or Tensors).
        rng: a JAX PRNG key for dropout and other random layers (required for
            dropout in training mode under a JAX transformation).
        strict: require every parameter and buffer to be given.
        **kwargs: keyword arguments of ``forward``.

    Returns:
        ``forward``'s output with Tensors replaced by their arrays.

    Raises:
        KeyError: a name in ``params`` is not a parameter or buffer of ``module``,
            or (``strict``) one is missing.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> import tensorplay_jax as tp
        >>> model = tp.nn.Linear(3, 1)
        >>> params = tp.nn.get_parameters(model)
        >>> loss = lambda p, x: jnp.sum(tp.nn.functional_call(model, p, x) ** 2)
        >>> grads = jax.jit(jax.grad(loss))(params, jnp.ones((4, 3)))
        >>> grads["weight"].shape
        (1, 3)
    """
    owners = _owners(module)
    outer = getattr(_overlay, "stack", None) or [{}]
    overlay = dict(outer[-1])
    for name, value in params.items():
        if name not in owners:
            known = ", ".join(sorted(owners)) or "none"
            raise KeyError(
                f"functional_call: {name!r} is not a parameter or buffer of "
                f"{type(module).__name__} (known: {known})"
            )
        mod, attr = owners[name]
        overlay[(id(mod), attr)] = _to_tensor(value)
    if strict:
        missing = sorted(set(owners) - set(params))
        if missing:
            raise KeyError(f"functional_call: strict=True and params lack {missing}")
    args, kwargs = jax.tree_util.tree_map(_to_tensor, (args, kwargs), is_leaf=_is_tensor)
    stack = getattr(_overlay, "stack", None)
    if stack is None:
        stack = _overlay.stack = []
    stack.append(overlay)
    try:
        scope = key_scope(rng) if rng is not None else contextlib.nullcontext()
        with no_grad(), scope:
            out = module(*args, **kwargs)
    finally:
        stack.pop()
    return jax.tree_util.tree_map(
        lambda t: t.value if isinstance(t, Tensor) else t, out, is_leaf=_is_tensor
    )
