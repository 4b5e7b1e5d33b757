"""Steps from sparse gradients, in place of the touched rows only: SGD's and ``SparseAdam``.

A sparse gradient (an ``nn.Embedding(sparse=True)`` table's) names the rows a batch
touched. Its step is one compiled call per number of rows that reads and writes
only those rows of the parameter (and of the optimizer's state), on buffers it
takes *donated* (``jax.jit(donate_argnums=...)``): XLA then updates them where they
are, so a step costs time proportional to the rows touched, not to the table.

What is donated: the optimizer's own state (SparseAdam's moments) and the
parameter's array, in ``step()`` and in ``DistributedOptimizer``'s step alike
(each bumps the version, so no recorded graph may use the old value anyway; an
embedding lookup's backward needs none of it). Tensors (the parameter, its
views, ``detach()``) see the new rows, as torch's in-place update shows them; an
array taken with ``p.value`` before the step is deleted by it.

Example:
    >>> import tensorplay_jax as tp
    >>> from tensorplay_jax import optim
    >>> emb = tp.nn.Embedding(4, 2, sparse=True)
    >>> emb.weight.data = tp.zeros(4, 2)
    >>> opt = optim.SparseAdam(emb.parameters(), lr=0.1)
    >>> emb(tp.tensor([1])).sum().backward()
    >>> opt.step()
    >>> print(emb.weight.numpy().round(4))   # only row 1 moved, by lr
    [[ 0.   0. ]
     [-0.1 -0.1]
     [ 0.   0. ]
     [ 0.   0. ]]
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tensorplay_jax.autograd import sparse_arrays as sa
from tensorplay_jax.optim._optimizer import Optimizer
from tensorplay_jax.runtime import xla_options
from tensorplay_jax.runtime.device import to_device
from tensorplay_jax.tensors import Tensor

__all__ = ["SparseAdam", "sgd_rows"]


def _rows(g: Any) -> tuple[jax.Array, jax.Array]:
    """The coalesced gradient's index rows and values, padded to a power of two rows (at
    least 8) so that the step compiles once per size class, not per count of distinct
    rows; a padding row's index is past the end, which the step's gathers read as zeros
    and its scatters drop."""
    c = sa.coalesce(g)
    idx, values = np.asarray(c.indices), np.asarray(c.data)
    n = idx.shape[0]
    size = max(8, 1 << max(n - 1, 0).bit_length())
    if size != n:
        idx = np.concatenate([idx, np.full((size - n, idx.shape[1]), g.shape[0], idx.dtype)])
        values = np.concatenate([values, np.zeros((size - n, *values.shape[1:]), values.dtype)])
    return to_device(idx), to_device(values)


def _add_rows(p: jax.Array, idx: jax.Array, values: jax.Array, scale: jax.Array) -> jax.Array:
    return p.at[tuple(idx.T)].add((scale * values).astype(p.dtype), mode="drop")


_ADD_ROWS = (xla_options.jit(_add_rows), xla_options.jit(_add_rows, donate_argnums=0))


def sgd_rows(p: jax.Array, g: Any, lr: float, maximize: bool, donate: bool) -> jax.Array:
    """``p - lr * g`` (``+`` when ``maximize``) for a sparse ``g``, on its rows only;
    ``donate``: in ``p``'s buffer (see the module)."""
    idx, values = _rows(g)
    return _ADD_ROWS[donate](p, idx, values, jnp.asarray(lr if maximize else -lr, p.dtype))


def _adam_rows(
    p: jax.Array,
    m: jax.Array,
    v: jax.Array,
    idx: jax.Array,
    g: jax.Array,
    hp: tuple[jax.Array, ...],
) -> tuple[jax.Array, jax.Array, jax.Array]:
    # torch's SparseAdam, on the rows of the (coalesced) gradient only:
    #   m_rows += (1 - b1) (g - m_rows);  v_rows += (1 - b2) (g^2 - v_rows)
    #   p_rows -= lr sqrt(1 - b2^t) / (1 - b1^t) * m_rows / (sqrt(v_rows) + eps)
    step_size, b1, b2, eps = hp
    rows = tuple(idx.T)
    g = g.astype(p.dtype)
    old_m = m.at[rows].get(mode="fill", fill_value=0)
    old_v = v.at[rows].get(mode="fill", fill_value=0)
    dm, dv = (g - old_m) * (1 - b1), (g * g - old_v) * (1 - b2)
    m = m.at[rows].add(dm, mode="drop")
    v = v.at[rows].add(dv, mode="drop")
    update = -step_size * (dm + old_m) / (jnp.sqrt(dv + old_v) + eps)
    return p.at[rows].add(update.astype(p.dtype), mode="drop"), m, v


# the moments are the optimizer's own: always donated; the parameter where the step may
_ADAM_ROWS = (
    xla_options.jit(_adam_rows, donate_argnums=(1, 2)),
    xla_options.jit(_adam_rows, donate_argnums=(0, 1, 2)),
)


class SparseAdam(Optimizer):
    """Adam for sparse gradients, torch's ``torch.optim.SparseAdam``.

    Only the rows a gradient touches move, and only their moments are updated (the
    "lazy" Adam of embedding tables); the moments are dense, the parameter's shape,
    as torch keeps them. Dense gradients are refused, as torch refuses them.

    Args:
      params: parameters, or param groups (dicts).
      lr: learning rate.
      betas: decay rates of the first and second moments.
      eps: added to the denominator.
      maximize: maximize the objective instead of minimizing it.

    Raises:
      ValueError: a hyper-parameter out of range.
      RuntimeError: a step with a dense gradient.
    """

    _STATIC = ("maximize",)

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        maximize: bool = False,
    ) -> None:
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, maximize=maximize))

    def _check(self, group: dict[str, Any]) -> None:
        self._nonnegative(group, "lr", "eps")
        self._betas(group)

    def apply_gradients(self, grads: Mapping[Tensor, Any], *, stale_check: bool = True) -> int:
        """One update from sparse gradients (parameter -> gradient); see ``Optimizer``."""
        for g in grads.values():
            value = g._value if isinstance(g, Tensor) else g
            if not sa.is_sparse_array(value):
                raise RuntimeError(
                    "SparseAdam does not support dense gradients, please consider Adam instead"
                )
        return super().apply_gradients(grads, stale_check=stale_check)

    def _sparse_step(self, group: dict[str, Any], p: Tensor, g: Any, donate: bool) -> jax.Array:
        b1, b2 = (float(b) for b in group["betas"])
        value = p.value
        state = self._state.get(p)
        if state is None:
            zeros = np.zeros(value.shape, value.dtype)
            state = {"step": jnp.zeros((), jnp.float32), "exp_avg": jnp.asarray(zeros)}
            state["exp_avg_sq"] = jnp.asarray(zeros)
        if g.nse == 0:  # nothing touched: nothing moves (torch skips it too)
            return value
        idx, values = _rows(g)
        if group["maximize"]:
            values = -values
        step = float(state["step"]) + 1
        lr = float(group["lr"])
        size = lr * math.sqrt(1 - b2**step) / (1 - b1**step)
        hp = tuple(jnp.asarray(x, value.dtype) for x in (size, b1, b2, float(group["eps"])))
        new, m, v = _ADAM_ROWS[donate](
            value, state["exp_avg"], state["exp_avg_sq"], idx, values, hp
        )
        self._state[p] = {"step": jnp.asarray(step, jnp.float32), "exp_avg": m, "exp_avg_sq": v}
        return new
