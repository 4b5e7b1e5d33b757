"""Demo: the ten differentiable collectives on 8 virtual CPU devices.

For each collective it prints rank r's input, output and gradient of
``loss = sum_r w_r * sum(y_r)`` with per-rank weights ``w_r = r + 1`` (so the
gradient rule is visible), the rule from the rule table
(``tensorplay_jax.collectives.rules``), and whether the gradient matches that rule
computed independently in numpy.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np

N = 8
SRC = 2
CASES: list[tuple[str, Callable, Callable, Callable]] = []


def _table() -> None:
    # (name, fn(x, axis), per-rank input(r), expected gradient(w, x) per rank); the rule
    # each one prints is its entry in the rule table (tensorplay_jax.collectives.rules).
    from tensorplay_jax import collectives as C

    ranks = np.arange(N)
    w = ranks + 1.0
    CASES[:] = [
        (
            "all_reduce",
            lambda x, a: C.all_reduce(x, a),
            lambda r: np.array([r, 10.0 * r]),
            lambda x: np.full_like(x, w.sum()),
        ),
        (
            "broadcast",
            lambda x, a: C.broadcast(x, SRC, a),
            lambda r: np.array([r, 10.0 * r]),
            lambda x: np.where(ranks[:, None] == SRC, w.sum(), 0.0) * np.ones_like(x),
        ),
        (
            "reduce",
            lambda x, a: C.reduce(x, SRC, a),
            lambda r: np.array([r, 10.0 * r]),
            lambda x: np.full_like(x, w[SRC]),
        ),
        (
            "gather",
            lambda x, a: C.gather(x, SRC, a),
            lambda r: np.array([r, 10.0 * r]),
            lambda x: np.full_like(x, w[SRC]),
        ),
        (
            "scatter",
            lambda x, a: C.scatter(x, SRC, a),
            lambda r: np.full(N, r, float),
            lambda x: np.where(ranks[:, None] == SRC, w[None, :], 0.0),
        ),
        (
            "reduce_scatter",
            lambda x, a: C.reduce_scatter(x, a),
            lambda r: np.full(N, r, float),
            lambda x: np.tile(w, (N, 1)),
        ),
        (
            "all_gather",
            lambda x, a: C.all_gather(x, a),
            lambda r: np.array([r, 10.0 * r]),
            lambda x: np.full_like(x, w.sum()),
        ),
        (
            "all_gather_single",
            lambda x, a: C.all_gather_single(x, a),
            lambda r: np.array([r, 10.0 * r]),
            lambda x: np.full_like(x, w.sum()),
        ),
        (
            "all_to_all",
            lambda x, a: C.all_to_all(x, a),
            lambda r: 10.0 * r + np.arange(N),
            lambda x: np.tile(w, (N, 1)),
        ),
        (
            "all_to_all_single",
            lambda x, a: C.all_to_all_single(x, a),
            lambda r: 10.0 * r + np.arange(N),
            lambda x: np.tile(w, (N, 1)),
        ),
    ]


def _rule_text(name: str) -> str:
    """The table's gradient rule for ``name``, with the root this demo uses."""
    from tensorplay_jax.collectives.rules import BY_NAME

    rule = BY_NAME[name]
    root = next((f" ({k}={SRC})" for k in ("src", "dst") if f" {k}," in rule.call), "")
    return f"{rule.formula} ({rule.backward}){root}"


def _fmt(v: np.ndarray) -> str:
    return np.array2string(
        np.asarray(v),
        precision=1,
        suppress_small=True,
        max_line_width=200,
        separator=" ",
        floatmode="maxprec",
    )


def run() -> bool:
    """Print every collective's value and gradient; return True if all match their rule."""
    os.environ.setdefault("XLA_FLAGS", f"--xla_force_host_platform_device_count={N}")
    import jax
    import jax.numpy as jnp
    from jax.sharding import AxisType
    from jax.sharding import PartitionSpec as P

    if jax.device_count() < N:
        raise SystemExit(
            f"the demo needs {N} devices; run with "
            f"XLA_FLAGS=--xla_force_host_platform_device_count={N}"
        )
    _table()
    mesh = jax.make_mesh((N,), ("i",), axis_types=(AxisType.Auto,), devices=jax.devices()[:N])
    w = jnp.arange(N, dtype=jnp.float32) + 1.0
    ok_all = True
    print(f"Ten differentiable collectives on {N} virtual CPU devices (jax {jax.__version__}).")
    print("Loss = sum_r w_r * sum(y_r) with w_r = r + 1, so dy_r = w_r.\n")
    for name, fn, make, expected in CASES:
        rule = _rule_text(name)
        f = jax.jit(
            jax.shard_map(
                lambda x, fn=fn: fn(x[0], "i")[None], mesh=mesh, in_specs=P("i"), out_specs=P("i")
            )
        )
        x = jnp.asarray(np.stack([make(r) for r in range(N)]), jnp.float32)
        y = f(x)
        loss = lambda x, f=f: jnp.sum(jnp.sum(f(x).reshape(N, -1), axis=1) * w)
        g = np.asarray(jax.grad(loss)(x))
        ok = np.allclose(g, expected(np.asarray(x)))
        ok_all &= ok
        print(f"== {name}: {rule}   [{'matches the rule' if ok else 'MISMATCH'}]")
        for r in (0, SRC, N - 1):
            print(f"   rank {r}: x={_fmt(x[r])}  y={_fmt(y[r])}  grad={_fmt(g[r])}")
    print("\nall gradients follow their rules" if ok_all else "\nSOME GRADIENTS ARE WRONG")
    return ok_all
