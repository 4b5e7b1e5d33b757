"""``Optimizer``: torch's optimizer interface (param groups, ``step``, ``zero_grad``) over a rule.

A subclass names its hyper-parameters (``defaults``), which of them are static
(booleans that change the program: ``nesterov``, ``amsgrad``...) and the
update rule: a function of the hyper-parameters returning an
``optax.GradientTransformation`` whose state is a dict with torch's state keys
(``momentum_buffer``, ``exp_avg``...). A step runs one jitted call per param
group (per device the group's parameters are on) for the parameters that have a
gradient: the rule is built inside the call from the group's current values, so
a changed ``param_groups[i]["lr"]`` takes effect on the next step without a new
compilation (numbers are traced; only the static flags and the parameters'
shapes pick the program, and JAX caches one per structure).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar

import jax
import optax

from tensorplay_jax.autograd import enable_grad, no_grad, sparse_arrays
from tensorplay_jax.optim import _state_dict
from tensorplay_jax.optim.updates import update_each
from tensorplay_jax.runtime import xla_options
from tensorplay_jax.tensors import Tensor, overwrite

__all__ = ["Optimizer"]

Rule = Callable[..., optax.GradientTransformation]


def _apply(rule: Rule, flags: tuple, hp: dict, grads: list, states: list, params: list) -> Any:
    """New values and states of ``params`` (the one jitted call of a group's step)."""
    return update_each(rule(**hp, **dict(flags)), grads, states, params)


_APPLY = xla_options.jit(_apply, static_argnums=(0, 1))


def _placement(value: Any) -> Any:
    """The sharding a committed value is on (None: uncommitted, JAX's default device)."""
    return value.sharding if isinstance(value, jax.Array) and value.committed else None


def _array_on(g: Any, where: Any, dtype: Any) -> Any:
    """Gradient ``g`` as an array of ``dtype`` on the parameter's sharding ``where``.

    ``where`` None: on the device it is. The dtype is the parameter's, so the state
    the rule keeps (a momentum buffer) stays in it whatever gradients arrive.
    """
    g = g.value if isinstance(g, Tensor) else g
    if getattr(g, "dtype", None) != dtype:
        g = jax.numpy.asarray(g, dtype)
    if where is None or (isinstance(g, jax.Array) and g.sharding == where):
        return g
    return jax.device_put(g, where)


def _sparse_value(g: Any) -> Any:
    """``g``'s sparse array (BCOO) when it is a sparse gradient, else None."""
    value = g._value if isinstance(g, Tensor) else g
    return value if sparse_arrays.is_sparse_array(value) else None


def _number(v: Any) -> Any:
    """A hyper-parameter as the traced call takes it: floats (a 0-d Tensor's value too)."""
    if isinstance(v, tuple | list):
        return tuple(_number(x) for x in v)
    if isinstance(v, Tensor):
        return float(v.item())
    return float(v)


class Optimizer:
    """The base of ``tensorplay_jax.optim``'s optimizers: torch's ``torch.optim.Optimizer``.

    ``param_groups`` is a list of dicts (``{"params": [...], "lr": ..., ...}``);
    each group's values fill in from ``defaults`` and may be changed between
    steps (a scheduler setting ``group["lr"]``). ``state`` maps each parameter
    that has been stepped to its state (torch's keys, e.g. ``"momentum_buffer"``).
    A step writes each new value into its parameter without recording it, bumps
    the parameter's version (a graph that saved the old value refuses to run
    backward) and updates its views, as torch's in-place update under
    ``no_grad`` does. Parameters without a ``.grad`` are skipped, state included.

    Subclasses set ``_RULE`` (hyper-parameters to an ``optax.GradientTransformation``),
    ``_STATIC`` (the group keys passed as static flags) and may override
    ``_flags`` (flags derived from a group) and ``_check`` (argument checks).

    Args:
      params: the parameters (an iterable of Tensors), or param groups (an iterable
        of dicts, each with a ``"params"`` entry).
      defaults: each hyper-parameter's value where a group does not set it.

    Raises:
      TypeError: ``params`` is a Tensor or a set, or holds something that is not a Tensor.
      ValueError: no parameters, a non-leaf Tensor, a parameter in two groups, or a
        hyper-parameter out of range (the message names it).

    Example:
      >>> import tensorplay_jax as tp
      >>> from tensorplay_jax import optim
      >>> w = tp.nn.Parameter(tp.tensor([1.0, 2.0]))
      >>> opt = optim.SGD([w], lr=0.5)
      >>> (w * w).sum().backward()      # grad 2w = [2, 4]
      >>> opt.step()
      >>> w
      Parameter containing:
      tensor([0., 0.], requires_grad=True)
      >>> opt.zero_grad(); w.grad is None
      True
    """

    _RULE: ClassVar[Rule]
    _STATIC: ClassVar[tuple[str, ...]] = ()

    def __init__(self, params: Iterable[Any], defaults: dict[str, Any]) -> None:
        self.defaults = dict(defaults)
        self.param_groups: list[dict[str, Any]] = []
        self._state: dict[Tensor, dict[str, jax.Array]] = {}
        name = type(self).__name__
        if isinstance(params, Tensor | set | frozenset):
            raise TypeError(
                f"{name}: params must be an ordered iterable of Tensors or of dicts (e.g. "
                f"model.parameters() or [w, b]), got {type(params).__qualname__}"
            )
        groups = list(params)
        if not groups:
            raise ValueError(f"{name}: optimizer got an empty parameter list (params)")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(group)

    # ----------------------------------------------------------------- subclass hooks
    def _flags(self, group: dict[str, Any]) -> dict[str, Any]:
        """The static flags of the rule for ``group`` (by default its ``_STATIC`` keys)."""
        return {k: bool(group[k]) for k in self._STATIC}

    def _check(self, group: dict[str, Any]) -> None:
        """Raise ValueError naming a hyper-parameter of ``group`` out of range."""

    def _nonnegative(self, group: dict[str, Any], *keys: str) -> None:
        for k in keys:
            v = group[k]
            if not isinstance(v, int | float | Tensor) or isinstance(v, bool) or v < 0:
                raise ValueError(
                    f"{type(self).__name__}: invalid {k}={v!r}; it must be a number >= 0"
                )

    def _betas(self, group: dict[str, Any]) -> None:
        """Raise ValueError unless ``group["betas"]`` is two numbers in [0, 1) (Adam's)."""
        betas = group["betas"]
        if not (
            isinstance(betas, tuple | list)
            and len(betas) == 2
            and all(isinstance(b, int | float) and 0 <= b < 1 for b in betas)
        ):
            raise ValueError(
                f"{type(self).__name__}: invalid betas={betas!r}; it must be two numbers "
                "in [0, 1), e.g. (0.9, 0.999)"
            )

    # ----------------------------------------------------------------- groups
    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a group (``{"params": [...], hyper-parameter: value, ...}``); defaults fill in.

        Args:
          param_group: the group's parameters and the hyper-parameters it sets.

        Raises:
          TypeError: not a dict, or ``params`` holds something that is not a Tensor.
          ValueError: a non-leaf Tensor, a parameter already in another group, or a
            hyper-parameter out of range.
        """
        name = type(self).__name__
        if not isinstance(param_group, dict):
            raise TypeError(
                f"{name}: a param group must be a dict with a 'params' entry, got "
                f"{type(param_group).__qualname__}"
            )
        params = param_group.get("params")
        if params is None:
            raise ValueError(f"{name}: the param group has no 'params' entry")
        if isinstance(params, Tensor):
            params = [params]
        elif isinstance(params, set | frozenset):
            raise TypeError(
                f"{name}: a group's params must be an ordered collection (list, tuple), not a "
                "set: the order must be the same between runs for state_dict to load"
            )
        params = list(params)
        for i, p in enumerate(params):
            if not isinstance(p, Tensor):
                raise TypeError(
                    f"{name}: params[{i}] is a {type(p).__qualname__}; an optimizer can only "
                    "optimize Tensors (pass model.parameters() or Tensors made with "
                    "requires_grad=True)"
                )
            if not p.is_leaf:
                raise ValueError(
                    f"{name}: params[{i}] is not a leaf Tensor (it came out of an operation); "
                    "can't optimize a non-leaf Tensor: pass the leaf, or t.detach()."
                    "requires_grad_()"
                )
        if len({id(p) for p in params}) != len(params):
            warnings.warn(
                f"{name}: a parameter group holds the same parameter more than once; it is "
                "stepped once per step",
                UserWarning,
                stacklevel=2,
            )
            params = list({id(p): p for p in params}.values())
        taken = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in taken for p in params):
            raise ValueError(
                f"{name}: some parameters appear in more than one parameter group (params)"
            )
        group = {**self.defaults, **param_group, "params": params}
        self._check(group)
        self.param_groups.append(group)

    # ----------------------------------------------------------------- the step
    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear every parameter's ``.grad``: to None (default), or zero it in place.

        Args:
          set_to_none: set ``.grad`` to None rather than writing zeros into it (in
            place, cut from any graph, as torch does: a reference to the gradient
            sees the zeros).
        """
        for group in self.param_groups:
            for p in group["params"]:
                g = p.grad
                if g is None:
                    continue
                if set_to_none:
                    p.grad = None
                    continue
                if g.grad_fn is not None:
                    g.detach_()
                else:
                    g.requires_grad_(False)
                with no_grad():
                    g.zero_()

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One update of every parameter that has a ``.grad``; returns ``closure()``'s loss.

        Args:
          closure: re-evaluates the model and returns the loss (run with grad enabled,
            before the update), or None.

        Returns:
          What ``closure`` returned, or None.
        """
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        grads = {p: p.grad for g in self.param_groups for p in g["params"] if p.grad is not None}
        self.apply_gradients(grads)
        return loss

    def apply_gradients(self, grads: Mapping[Tensor, Any], *, stale_check: bool = True) -> int:
        """One update from ``grads`` (parameter -> gradient) instead of the ``.grad`` fields.

        Parameters not in ``grads`` are skipped (state included). This is the step
        ``DistributedOptimizer`` runs on each owner with the gradients of a
        distributed-autograd context, with ``stale_check=False``: there several
        trainers' forward and backward passes interleave with the steps (a shared
        parameter server), and since a graph keeps the values its forward used
        (immutable arrays), its backward stays correct after a step.

        A sparse gradient steps its parameter in place either way (its rows written
        in the parameter's donated buffer, its version bumped, as ``step`` does):
        copying a table of millions of rows a step is what sparse gradients exist to
        avoid, and the lookups that make them keep no value of the table for their
        backward. A graph that saved the table itself before the step (a dense use)
        then refuses to run backward, as torch's in-place step makes it.

        Args:
          grads: a gradient (Tensor or array, the parameter's shape) per parameter.
          stale_check: bump each parameter's version (as ``step`` does), so a graph
            recorded before the step refuses to run backward; False writes dense
            updates as ``p.data = new`` does (version and views unchanged).

        Returns:
          How many parameters were updated.
        """
        done = 0
        for group in self.param_groups:
            params = [p for p in group["params"] if p in grads]
            if not params:
                continue
            sparse = {p: g for p in params if (g := _sparse_value(grads[p])) is not None}
            if sparse:  # sparse gradients: their rows only (see optim._sparse)
                for p, g in sparse.items():
                    if tuple(g.shape) != p.shape:
                        raise ValueError(
                            f"{type(self).__name__}.step: a sparse gradient has shape "
                            f"{tuple(g.shape)} but its parameter has shape {p.shape}"
                        )
                    overwrite(p, self._sparse_step(group, p, g, True))
                done += len(sparse)
                params = [p for p in params if p not in sparse]
                if not params:
                    continue
            flags = tuple(sorted(self._flags(group).items()))
            hp = {k: _number(group[k]) for k in self.defaults if k not in self._STATIC}
            by_place: dict[Any, list[Tensor]] = {}
            for p in params:
                by_place.setdefault(_placement(p.value), []).append(p)
            for where, ps in by_place.items():
                gs = [_array_on(grads[p], where, p.dtype) for p in ps]
                for p, g in zip(ps, gs, strict=True):
                    if tuple(g.shape) != p.shape:
                        raise ValueError(
                            f"{type(self).__name__}.step: a gradient has shape {tuple(g.shape)} "
                            f"but its parameter has shape {p.shape}"
                        )
                values = [p.value for p in ps]
                # a first step's state is made here, eagerly: tracing the call once more for
                # the first step's structure would cost more than these few zeros
                states = [
                    self._state[p] if p in self._state else self._init(flags, hp, v)
                    for p, v in zip(ps, values, strict=True)
                ]
                values, states = _APPLY(type(self)._RULE, flags, hp, gs, states, values)
                for p, v, s in zip(ps, values, states, strict=True):
                    if stale_check:
                        overwrite(p, v)
                    else:
                        p.data = v
                    self._state[p] = s
            done += len(params)
        return done

    def _sparse_step(self, group: dict[str, Any], p: Tensor, g: Any, donate: bool) -> jax.Array:
        """The new value of ``p`` for the sparse gradient ``g`` (a BCOO), in ``p``'s buffer
        when ``donate``; an optimizer that steps sparse gradients overrides this."""
        name = type(self).__name__
        raise RuntimeError(
            f"{name} does not support sparse gradients, please consider SparseAdam instead "
            "(or SGD without momentum and weight decay), or give the parameter a dense "
            "gradient (e.g. nn.Embedding(..., sparse=False))"
        )

    def _init(self, flags: tuple, hp: dict, value: jax.Array) -> dict[str, jax.Array]:
        return type(self)._RULE(**hp, **dict(flags)).init(value)

    # ----------------------------------------------------------------- state
    @property
    def state(self) -> dict[Tensor, dict[str, Tensor]]:
        """Each stepped parameter's state, torch's keys to Tensors (a snapshot)."""
        return {p: {k: Tensor(v) for k, v in s.items()} for p, s in self._state.items()}

    def state_dict(self) -> dict[str, Any]:
        """The state and hyper-parameters in torch's layout; parameters are numbered.

        Returns:
          ``{"state": {index: {key: Tensor}}, "param_groups": [{..., "params": [index...]}]}``,
          the indices counting parameters across groups in order, as torch's do.
        """
        return _state_dict.save(self.param_groups, self._state)

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore what ``state_dict()`` returned (ours or torch's for the same optimizer).

        Args:
          state_dict: ``{"state": ..., "param_groups": ...}``; its groups must match this
            optimizer's in number and sizes.

        Raises:
          ValueError: the groups do not match, or the layout is not a state dict.
        """
        self._state = _state_dict.load(type(self).__name__, self.param_groups, state_dict)

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for k in sorted(group):
                if k != "params":
                    lines.append(f"    {k}: {group[k]}")
        return "\n".join([*lines, ")"])
