"""Bad input: each error names the function and the problem (asserted by substring)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from tensorplay_jax import collectives as C
from tests.collectives._harness import spmd

N = 4


def run(fn, per_rank=(N, 2), dtype=jnp.float32):
    return spmd(fn, "shard_map-jit", N)(jnp.ones((N, *per_rank), dtype))


ALL = [
    ("all_reduce", lambda x, a: C.all_reduce(x, a)),
    ("broadcast", lambda x, a: C.broadcast(x, 0, a)),
    ("reduce", lambda x, a: C.reduce(x, 0, a)),
    ("gather", lambda x, a: C.gather(x, 0, a)),
    ("scatter", lambda x, a: C.scatter(x, 0, a)),
    ("reduce_scatter", lambda x, a: C.reduce_scatter(x, a)),
    ("all_gather", lambda x, a: C.all_gather(x, a)),
    ("all_gather_single", lambda x, a: C.all_gather_single(x, a)),
    ("all_to_all", lambda x, a: C.all_to_all(x, a)),
    ("all_to_all_single", lambda x, a: C.all_to_all_single(x, a)),
]


@pytest.mark.parametrize("name,fn", ALL, ids=[a[0] for a in ALL])
def test_unbound_axis_name(name, fn):
    with pytest.raises(ValueError, match=rf"{name}: axis_name='nope' is not bound here"):
        run(lambda x, a: fn(x, "nope"))


@pytest.mark.parametrize("name,fn", ALL, ids=[a[0] for a in ALL])
def test_outside_any_mapped_axis(name, fn):
    with pytest.raises(ValueError, match=rf"{name}: axis_name='i' is not bound here"):
        fn(jnp.ones((N, 2)), "i")


@pytest.mark.parametrize(
    "name,fn,arg",
    [
        ("broadcast", lambda v: lambda x, a: C.broadcast(x, v, a), "src"),
        ("reduce", lambda v: lambda x, a: C.reduce(x, v, a), "dst"),
        ("gather", lambda v: lambda x, a: C.gather(x, v, a), "dst"),
        ("scatter", lambda v: lambda x, a: C.scatter(x, v, a), "src"),
    ],
)
@pytest.mark.parametrize("bad", [N, -1, 99])
def test_rank_out_of_range(name, fn, arg, bad):
    with pytest.raises(ValueError, match=rf"{name}: {arg}={bad} is out of range .* size {N}"):
        run(fn(bad))


def test_rank_must_be_static_int():
    with pytest.raises(TypeError, match="broadcast: src must be a static Python int"):
        run(lambda x, a: C.broadcast(x, 1.5, a))
    with pytest.raises(TypeError, match="broadcast: src must be an int rank"):
        run(lambda x, a: C.broadcast(x, True, a))


@pytest.mark.parametrize(
    "name,fn,per_rank,msg",
    [
        (
            "scatter",
            lambda x, a: C.scatter(x, 0, a),
            (3, 2),
            r"x.shape\[0\]=3 must equal the axis size 4",
        ),
        ("reduce_scatter", lambda x, a: C.reduce_scatter(x, a), (5,), r"x.shape\[0\]=5 must equal"),
        ("reduce_scatter", lambda x, a: C.reduce_scatter(x, a, axis=1), (4, 3), r"x.shape\[1\]=3"),
        (
            "all_to_all",
            lambda x, a: C.all_to_all(x, a),
            (6, 2),
            r"x.shape\[0\]=6 is not divisible by the axis size 4",
        ),
        (
            "all_to_all",
            lambda x, a: C.all_to_all(x, a, split_axis=1),
            (4, 3),
            r"x.shape\[1\]=3 is not divisible",
        ),
        (
            "all_to_all_single",
            lambda x, a: C.all_to_all_single(x, a),
            (6, 2),
            "x has 6 rows, not divisible by the axis size 4",
        ),
    ],
)
def test_dimension_not_divisible(name, fn, per_rank, msg):
    with pytest.raises(ValueError, match=rf"{name}: .*{msg}" if not msg.startswith(name) else msg):
        run(fn, per_rank)


@pytest.mark.parametrize(
    "kwargs,msg",
    [
        (
            {"input_split_sizes": [1, 1, 1]},
            "input_split_sizes has 3 entries, expected one per rank (4)",
        ),
        ({"input_split_sizes": [0, 1, 1, 2]}, "ranks would receive [0, 4, 4, 8] rows"),
        (
            {"input_split_sizes": [1, 1, 1, 2]},
            "do not add up to x's 4 rows (ranks send [5, 5, 5, 5])",
        ),
        ({"input_split_sizes": [2, 2, 2, 2]}, "do not add up to x's 4 rows"),
        ({"input_split_sizes": [1, 1, 1, -1]}, "input_split_sizes must be non-negative"),
        ({"input_split_sizes": [[1, 3, 0, 0]] * 4}, "ranks would receive [4, 12, 0, 0] rows"),
        ({"input_split_sizes": [[1, 1, 1]] * 4}, "must be 4 lists of 4 ints"),
        (
            {"output_split_sizes": [1, 1, 1, 1], "input_split_sizes": [[2, 0, 1, 1]] * 4},
            "do not match",
        ),
        ({"input_split_sizes": [1.0, 1, 1, 1]}, "must hold static Python ints"),
    ],
)
def test_all_to_all_single_split_sizes(kwargs, msg):
    with pytest.raises((ValueError, TypeError), match="all_to_all_single: .*" + _esc(msg)):
        run(lambda x, a: C.all_to_all_single(x, a, **kwargs), (4,))


def _esc(s):
    import re

    return re.escape(s)


@pytest.mark.parametrize(
    "name,fn",
    [
        ("all_reduce", lambda x, a: C.all_reduce(x, a, op="median")),
        ("reduce", lambda x, a: C.reduce(x, 0, a, op="mean")),
        ("reduce_scatter", lambda x, a: C.reduce_scatter(x, a, op=None)),
    ],
)
def test_unknown_op(name, fn):
    with pytest.raises(ValueError, match=rf"{name}: unknown op=.*expected one of 'sum', 'avg'"):
        run(fn)


def test_avg_on_integers():
    with pytest.raises(TypeError, match="all_reduce: op='avg' needs a floating"):
        run(lambda x, a: C.all_reduce(x, a, op="avg"), dtype=jnp.int32)


def test_axis_out_of_range_and_zero_d():
    with pytest.raises(ValueError, match="all_gather: axis=5 is out of range"):
        run(lambda x, a: C.all_gather(x, a, axis=5))
    with pytest.raises(ValueError, match="all_gather_single: x is 0-d"):
        run(lambda x, a: C.all_gather_single(x[0, 0], a)[None, None])
    with pytest.raises(ValueError, match="all_to_all: x is 0-d"):
        run(lambda x, a: C.all_to_all(x[0, 0], a))


def test_tuple_axis_name_rejected():
    with pytest.raises(TypeError, match="all_reduce: axis_name must be a single mapped axis"):
        run(lambda x, a: C.all_reduce(x, (a, a)))


def test_errors_are_raised_before_tracing_collectives():
    # Validation happens in the public function: the same call on a numpy array
    # outside any mapped axis reports the axis problem, not a JAX internal error.
    with pytest.raises(ValueError, match="reduce: axis_name='i' is not bound"):
        C.reduce(np.ones(3), 0, "i")
