"""``tp.Generator``: its own JAX key, passed as ``generator=``; the global state untouched."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay_jax as tp

DRAWS = {
    "randn": lambda g: tp.randn(2, 3, generator=g),
    "rand": lambda g: tp.rand(4, generator=g),
    "randint": lambda g: tp.randint(0, 100, (5,), generator=g),
    "randperm": lambda g: tp.randperm(6, generator=g),
    "normal_": lambda g: tp.zeros(4).normal_(1.0, 2.0, generator=g),
    "uniform_": lambda g: tp.zeros(4).uniform_(-1.0, 1.0, generator=g),
    "init.normal_": lambda g: tp.nn.init.normal_(tp.zeros(3), generator=g),
    "init.uniform_": lambda g: tp.nn.init.uniform_(tp.zeros(3), generator=g),
}


@pytest.mark.parametrize("name", list(DRAWS))
def test_same_seed_same_numbers(name):
    draw = DRAWS[name]
    a = draw(tp.Generator().manual_seed(5)).numpy()
    b = draw(tp.Generator().manual_seed(5)).numpy()
    c = draw(tp.Generator().manual_seed(6)).numpy()
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


@pytest.mark.parametrize("name", list(DRAWS))
def test_draws_leave_the_global_state_alone(name):
    tp.manual_seed(0)
    want = tp.randn(3).numpy()
    tp.manual_seed(0)
    DRAWS[name](tp.Generator().manual_seed(1))
    np.testing.assert_array_equal(tp.randn(3).numpy(), want)


def test_global_seed_does_not_move_a_generator():
    g = tp.Generator().manual_seed(3)
    a = tp.randn(3, generator=g).numpy()
    g.manual_seed(3)
    tp.manual_seed(99)
    tp.randn(10)
    np.testing.assert_array_equal(tp.randn(3, generator=g).numpy(), a)


def test_same_seed_as_the_global_state_gives_the_same_numbers():
    tp.manual_seed(7)
    np.testing.assert_array_equal(
        tp.randn(4).numpy(), tp.randn(4, generator=tp.Generator().manual_seed(7)).numpy()
    )


def test_successive_draws_differ():
    g = tp.Generator().manual_seed(0)
    assert not np.array_equal(tp.rand(4, generator=g).numpy(), tp.rand(4, generator=g).numpy())


def test_seeds():
    g = tp.Generator()
    assert g.initial_seed() == 67280421310721  # torch's default
    assert g.manual_seed(12) is g and g.initial_seed() == 12
    s = g.seed()
    assert isinstance(s, int) and g.initial_seed() == s


def test_get_state_set_state_replays():
    g = tp.Generator().manual_seed(0)
    tp.rand(2, generator=g)
    state = g.get_state()
    assert state.dtype == np.uint8
    a = tp.rand(3, generator=g).numpy()
    assert g.set_state(state) is g
    np.testing.assert_array_equal(tp.rand(3, generator=g).numpy(), a)


def test_randperm_is_a_permutation():
    p = tp.randperm(10, generator=tp.Generator().manual_seed(1)).numpy()
    assert sorted(p.tolist()) == list(range(10))


def test_errors_name_the_fix():
    with pytest.raises(TypeError, match=r"generator must be a tp.Generator"):
        tp.randn(2, generator=123)
    with pytest.raises(TypeError, match="expected a uint8 Tensor"):
        tp.Generator().set_state(tp.ones(3))
    with pytest.raises(ValueError, match="n must be a non-negative int"):
        tp.randperm(-1)
