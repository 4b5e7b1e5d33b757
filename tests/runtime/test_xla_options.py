"""Our own programs' XLA options (``runtime.xla_options``), and host data that compiles nothing."""

from __future__ import annotations

import contextlib
import pickle

import jax
import jax.numpy as jnp
import jaxlib.version
import numpy as np
import pytest

import tensorplay_jax as tp
from tensorplay_jax.runtime import xla_options
from tensorplay_jax.runtime.x64 import Float64TruncatedWarning
from tests._jax_events import COMPILE, events


def compiled_programs() -> contextlib.AbstractContextManager[list[float]]:
    """The XLA compilations (their seconds) made inside the block, in this process."""
    return events(COMPILE)


def test_jaxlib_0_10_compiles_our_programs_with_the_loop_emitter(monkeypatch):
    monkeypatch.delenv("TENSORPLAY_JAX_XLA_DEFAULTS", raising=False)
    options = xla_options.compiler_options()
    if jaxlib.version.__version_info__[:2] < (0, 11):
        assert options == {"xla_cpu_use_fusion_emitters": False}
    else:  # the option is gone: XLA's defaults
        assert options == {}


def test_the_setting_gives_xla_defaults(monkeypatch):
    monkeypatch.setenv("TENSORPLAY_JAX_XLA_DEFAULTS", "1")
    assert xla_options.compiler_options() == {}


def test_a_program_of_ours_runs_inside_a_users_jit_and_grad():
    double_sin = xla_options.jit(lambda x: 2 * jnp.sin(x))
    x = jnp.linspace(0.0, 1.0, 5)

    @jax.jit
    def users(v):  # jax.jit refuses compiler_options on a nested jit; ours must not raise
        return jax.grad(lambda u: double_sin(u).sum())(v)

    np.testing.assert_allclose(np.asarray(users(x)), 2 * np.cos(np.asarray(x)), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(double_sin(x)), 2 * np.sin(np.asarray(x)), rtol=1e-6)


def test_static_arguments_and_eval_shape_pass_through():
    tile = xla_options.jit(lambda x, n: jnp.tile(x, n), static_argnums=1)
    assert tile(jnp.ones(2), 3).shape == (6,)
    assert tile.eval_shape(jax.ShapeDtypeStruct((4,), jnp.float32), 2).shape == (8,)


def test_the_tapes_ops_work_on_tensors_inside_a_users_jit():
    w = tp.ones(3, requires_grad=True)

    @jax.jit
    def users(v):  # an operation of ours on tracers, and one on a concrete leaf in the trace
        return (tp.Tensor(v) * 2).sum().value + (w * 3).sum().value

    assert float(users(jnp.arange(3.0))) == pytest.approx(6.0 + 9.0)


@pytest.mark.parametrize(
    "make",
    [
        lambda n: tp.zeros(n, 3),
        lambda n: tp.ones(n, dtype=tp.int32),
        lambda n: tp.full((n,), 2.5, dtype=tp.float32),
        lambda n: tp.zeros_like(tp.empty(n)),
        lambda n: tp.tensor([1.0] * n),
        lambda n: tp.tensor(np.arange(n)),
        lambda n: tp.from_numpy(np.ones((n, 2), np.float32)),
        lambda n: tp.Tensor(np.ones(n, np.float32)),
        lambda n: pickle.loads(pickle.dumps(tp.Tensor(np.ones(n, np.float32)))),
    ],
    ids=[
        "zeros",
        "ones",
        "full",
        "zeros_like",
        "tensor_list",
        "tensor_ndarray",
        "from_numpy",
        "Tensor_ndarray",
        "unpickled",
    ],
)
def test_tensors_from_host_data_compile_no_program(make):
    make(1)  # anything a first call sets up
    with compiled_programs() as seconds:
        made = [make(n) for n in (5, 6, 7)]
    assert seconds == []
    assert [t.shape[0] for t in made] == [5, 6, 7]


def test_host_fills_keep_values_dtypes_and_the_arrays_independence():
    assert tp.zeros(2, 2).tolist() == [[0.0, 0.0], [0.0, 0.0]]
    assert tp.ones(3, dtype=tp.int32).dtype == np.int32
    assert tp.full((2,), 7, dtype=tp.float16).tolist() == [7.0, 7.0]
    assert tp.tensor([1.5, 2.0]).dtype == np.float32  # Python floats: float32
    with pytest.warns(Float64TruncatedWarning, match="float64 data becomes float32"):
        assert tp.tensor(np.arange(3.0)).dtype == np.float32  # float64 without jax_enable_x64
    source = np.ones(3, np.float32)
    t = tp.from_numpy(source)
    source[0] = 5.0  # the Tensor holds its own copy
    assert t.tolist() == [1.0, 1.0, 1.0]
    big = tp.zeros(300, 300)  # above the host-fill size: XLA fills it
    assert big.shape == (300, 300) and float(big.sum()) == 0.0


def test_host_made_tensors_follow_jaxs_default_device_uncommitted():
    second = jax.devices()[1]
    with jax.default_device(second):
        made = [tp.zeros(2), tp.tensor([1.0, 2.0]), tp.from_numpy(np.ones(2, np.float32))]
    for t in made:
        assert t.value.devices() == {second}
        assert not t.value.committed  # as jnp.zeros: free to move to an operand's device
