"""Per-process seeding (torch's default: from the OS) and ``tp.compile``'s torch signature."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import tensorplay_jax as tp

_DRAW = (
    "import tensorplay_jax as tp\n"
    "print(tp.randn(4).tolist(), tp.initial_seed())\n"
    "tp.manual_seed(543)\n"
    "print(tp.randn(4).tolist(), tp.initial_seed())\n"
)


def test_fresh_processes_draw_from_the_os_unless_seeded():
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    procs = [
        subprocess.Popen([sys.executable, "-c", _DRAW], stdout=subprocess.PIPE, text=True, env=env)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120)[0].splitlines() for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert outs[0][0] != outs[1][0]  # unseeded: different values and different seeds
    assert outs[0][1] == outs[1][1] and outs[0][1].endswith(" 543")


def test_manual_seed_is_exact_in_process():
    tp.manual_seed(11)
    a = tp.randn(3).tolist()
    tp.manual_seed(11)
    assert tp.randn(3).tolist() == a and tp.initial_seed() == 11


def test_compile_returns_the_callable():
    def step(x):
        return (x * 2).sum()

    assert tp.compile(step) is step
    assert tp.compile(step, fullgraph=True, dynamic=False, backend="inductor") is step
    assert tp.compile(mode="max-autotune")(step) is step
    opt_step = tp.nn.Linear(2, 2).parameters  # a bound method, as torch.compile(opt.step)
    assert tp.compile(opt_step) is opt_step


def test_compile_jax_backend_jits_pure_functions():
    import jax.numpy as jnp

    f = tp.compile(lambda a: a * 3.0, backend="jax")
    assert float(f(jnp.float32(2.0))) == 6.0 and f is not None and hasattr(f, "lower")


def test_compile_rejects_unknown_mode():
    with pytest.raises(ValueError, match="unknown mode 'fast'"):
        tp.compile(lambda: None, mode="fast")


_SHAPES = [(), (0, 3), (7,), (33, 31), (2, 3, 2, 2)]  # 1 element, empty, odd sizes, 4-d


@pytest.mark.parametrize("shape", _SHAPES, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_random_fills_give_jax_randoms_values_for_the_same_key(shape, dtype):
    import jax
    import numpy as np

    dt = np.dtype(getattr(jax.numpy, dtype))
    draws = {
        "randn": (lambda: tp.randn(shape, dtype=dt), lambda k: jax.random.normal(k, shape, dt)),
        "rand": (lambda: tp.rand(shape, dtype=dt), lambda k: jax.random.uniform(k, shape, dt)),
        "normal_": (
            lambda: tp.zeros(shape, dtype=dt).normal_(0.5, 2.0),
            lambda k: 0.5 + 2.0 * jax.random.normal(k, shape, dt),
        ),
        "uniform_": (
            lambda: tp.zeros(shape, dtype=dt).uniform_(-0.5, 0.25),
            lambda k: jax.random.uniform(k, shape, dt, -0.5, 0.25),
        ),
    }
    for name, (ours, oracle) in draws.items():
        tp.manual_seed(11)
        got = ours()
        key = jax.random.split(jax.random.key(11))[1]  # the first key manual_seed(11) hands out
        want = oracle(key)
        assert got.dtype == want.dtype and got.shape == want.shape, name
        np.testing.assert_array_equal(
            np.asarray(got.numpy(), np.float32), np.asarray(want, np.float32), err_msg=name
        )


def test_small_draws_of_any_size_share_one_compiled_draw():
    import jax
    import numpy as np

    from tensorplay_jax.tensors import _random

    compiled: list[str] = []

    def listener(name: str, secs: float, **kwargs: object) -> None:
        if name == "/jax/core/compile/backend_compile_duration":
            compiled.append(name)

    key = jax.random.key(3)
    _random.flat_draw("normal", key, 1, np.float32)  # warm: the smallest bucket
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        draws = {n: _random.flat_draw("normal", key, n, np.float32) for n in (2, 17, 300, 1000)}
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    assert compiled == []
    for n, z in draws.items():  # the same values as jax.random's own draw of that size
        np.testing.assert_array_equal(np.asarray(z)[:n], np.asarray(jax.random.normal(key, (n,))))


def test_randint_of_a_new_length_compiles_no_new_draw():
    import jax

    import tensorplay_jax as tp

    compiled: list[str] = []

    def listener(name: str, secs: float, **kwargs: object) -> None:
        if name == "/jax/core/compile/backend_compile_duration":
            compiled.append(str(kwargs.get("fun_name")))

    tp.randint(0, 100, (20,))  # warm: the smallest bucket
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        for n in (21, 33, 50, 1000):  # an embedding bag's lengths: one draw for all
            assert tuple(tp.randint(0, 100, (n,)).shape) == (n,)
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    assert "jit(_flat_draw)" not in compiled and "jit(_randint)" not in compiled, compiled


def test_randint_draws_what_jax_random_randint_draws_from_the_same_key():
    import jax
    import numpy as np

    from tensorplay_jax.tensors import _random

    k = jax.random.key(11)
    for shape, low, high in (((37,), 0, 1000), ((4, 9), -5, 17), ((3,), 0, 2**31 - 1)):
        got = _random.integers(k, shape, low, high, np.int32)
        want = jax.random.randint(k, shape, low, high, np.int32)  # jax's own draw
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
