"""Devices as tensorplay code writes them: factories' ``device=``, ``Tensor.to``/``cpu``/``cuda``.

Runs on the 8 virtual CPU devices of ``tests/conftest.py``; ``cuda`` is absent here,
so its error path is what is tested.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tensorplay_jax as tp
from tensorplay_jax.runtime.device import parse_device, resolve_device

CPU = jax.devices("cpu")


def _on(t: tp.Tensor) -> jax.Device:
    (dev,) = t.value.devices()
    return dev


FACTORIES = [
    ("tensor", lambda d: tp.tensor([1.0, 2.0], device=d)),
    ("randn", lambda d: tp.randn(4, 8, device=d, requires_grad=True)),
    ("rand", lambda d: tp.rand(3, device=d)),
    ("randint", lambda d: tp.randint(0, 5, (3,), device=d)),
    ("ones", lambda d: tp.ones(2, 3, device=d)),
    ("zeros", lambda d: tp.zeros((2,), device=d)),
    ("empty", lambda d: tp.empty(2, device=d)),
    ("full", lambda d: tp.full((2,), 1.5, device=d)),
    ("arange", lambda d: tp.arange(4, device=d)),
    ("eye", lambda d: tp.eye(2, device=d)),
    ("zeros_like", lambda d: tp.zeros_like(tp.ones(2), device=d)),
    ("ones_like", lambda d: tp.ones_like(tp.ones(2), device=d)),
    ("randn_like", lambda d: tp.randn_like(tp.ones(2), device=d)),
]


@pytest.mark.parametrize("name,make", FACTORIES, ids=[f[0] for f in FACTORIES])
def test_factories_place_on_the_named_device(name, make):
    assert len(CPU) >= 4, "tests/conftest.py gives 8 virtual CPU devices"
    assert _on(make("cpu:1")) == CPU[1]
    assert _on(make(CPU[3])) == CPU[3]  # a jax.Device
    assert _on(make("cpu")) == CPU[0]
    assert _on(make(None)) == jax.devices()[0]  # JAX's default
    with pytest.raises(RuntimeError, match=rf"tp\.{name}: device 'cuda' is not available here"):
        make("cuda")


def test_randn_with_device_is_a_leaf_that_collects_gradients():
    x = tp.randn(4, 8, device="cpu:1", requires_grad=True)
    assert x.requires_grad and x.grad_fn is None
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * x.numpy(), rtol=1e-6)
    assert _on(x.grad) == CPU[1]


def test_like_factories_keep_the_device_of_their_input():
    x = tp.ones(2, device="cpu:2")
    assert _on(tp.zeros_like(x)) == CPU[2]
    assert _on(tp.ones_like(x)) == CPU[2]
    assert _on(tp.randn_like(x)) == CPU[2]


def test_absent_device_names_the_devices_present():
    with pytest.raises(RuntimeError) as e:
        tp.randn(4, 8, device="cuda", requires_grad=True)
    assert str(e.value) == ("tp.randn: device 'cuda' is not available here; devices: cpu:0..cpu:7")
    for spec in ("gpu", "cuda:1", "tpu", "cpu:8"):
        with pytest.raises(RuntimeError, match=f"device '{spec}' is not available here"):
            tp.ones(1, device=spec)
    with pytest.raises(RuntimeError, match=r"Tensor\.to: device 'cuda:0' is not available"):
        tp.ones(1).to("cuda:0")
    with pytest.raises(RuntimeError, match="device 'cuda' is not available here; devices: cpu:0"):
        tp.ones(1).cuda()
    with pytest.raises(RuntimeError, match="device 'cuda:1' is not available here"):
        tp.ones(1).cuda(1)


def test_unknown_device_names_are_rejected():
    with pytest.raises(ValueError, match=r"tp\.zeros: unknown device type 'xpu'; expected one of"):
        tp.zeros(1, device="xpu")
    with pytest.raises(ValueError, match="unknown device type 'CUDA'"):
        tp.zeros(1, device="CUDA")
    # An int is an accelerator index, as in torch; this host has none.
    with pytest.raises(RuntimeError, match="cannot access accelerator device when none"):
        tp.zeros(1, device=3)
    assert parse_device("cuda:1") == ("cuda", 1)
    assert parse_device("gpu") == ("gpu", None)
    assert resolve_device("cpu:5") == CPU[5]


def test_to_moves_and_reports_the_device():
    x = tp.arange(6.0)
    y = x.to("cpu:1")
    assert _on(y) == CPU[1] and y.device == CPU[1]
    np.testing.assert_array_equal(y.numpy(), x.numpy())
    assert y.to("cpu:1") is y  # already there
    assert y.to(CPU[1]) is y
    z = y.to(x)  # other's device and dtype
    assert z.device == x.device and z.dtype == x.dtype
    back = y.cpu()
    assert back.device == CPU[0]
    assert back.cpu() is back and x.cpu() is x


def test_to_dtype_and_device_with_dtype():
    x = tp.ones(2, device="cpu:2")
    h = x.to(jnp.float16)
    assert h.dtype == jnp.float16 and h.device == CPU[2]
    both = x.to("cpu:3", jnp.int32)
    assert both.dtype == jnp.int32 and both.device == CPU[3]
    kw = x.to(device="cpu:4", dtype="float16")
    assert kw.dtype == jnp.float16 and kw.device == CPU[4]
    assert x.to(jnp.float32) is x
    c = x.to("cpu:2", copy=True)
    assert c is not x and c.device == CPU[2]
    with pytest.raises(TypeError, match="unexpected keyword"):
        x.to(devic="cpu")
    with pytest.raises(TypeError, match="at most a device and a dtype"):
        x.to("cpu", jnp.float32, 1)


def test_gradients_flow_through_moves_against_jax_grad():
    rng = np.random.default_rng(0)
    a0 = rng.standard_normal((3, 4)).astype(np.float32)
    w0 = rng.standard_normal((4, 2)).astype(np.float32)

    a = tp.tensor(a0, device="cpu:1", requires_grad=True)
    w = tp.tensor(w0, requires_grad=True)  # default device
    h = a.to("cpu:2").tanh()
    out = (h.to("cpu:0") @ w).to("cpu:3", jnp.float32)
    loss = (out * out).sum()
    assert loss.device == CPU[3]
    loss.backward()

    def oracle(a, w):
        return jnp.sum((jnp.tanh(a) @ w) ** 2)

    ga, gw = jax.grad(oracle, argnums=(0, 1))(jnp.asarray(a0), jnp.asarray(w0))
    np.testing.assert_allclose(a.grad.numpy(), ga, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(w.grad.numpy(), gw, rtol=1e-5, atol=1e-6)
    assert _on(a.grad) == CPU[1]  # each gradient lands where its leaf lives
    assert w.grad.device == jax.devices()[0]


def test_moves_inside_jax_transformations_defer_to_jax():
    def f(v):
        return (tp.Tensor(v).to("cpu:1") * 3.0).sum().value

    np.testing.assert_allclose(jax.grad(f)(jnp.ones(2)), [3.0, 3.0])


def test_no_grad_move_is_a_plain_tensor():
    x = tp.ones(2, requires_grad=True)
    with tp.no_grad():
        y = x.to("cpu:1")
    assert not y.requires_grad and y.grad_fn is None


def test_module_to_device_and_dtype_moves_every_parameter_and_trains_there():
    from tensorplay_jax import nn

    m = nn.Linear(3, 2)
    w0 = np.asarray(m.weight.value)
    assert m.to("cpu:1") is m
    assert {_on(p) for p in m.parameters()} == {CPU[1]}
    x = tp.ones(4, 3, device="cpu:1")
    m(x).sum().backward()
    # d/dW sum(x @ W.T + b) = column sums of x, on every output row
    np.testing.assert_allclose(np.asarray(m.weight.grad.value), np.full((2, 3), 4.0))
    np.testing.assert_array_equal(np.asarray(m.weight.value), w0)  # moved, not changed
    m.to(CPU[2], jnp.bfloat16)
    assert m.weight.dtype == jnp.bfloat16 and _on(m.weight) == CPU[2]
    m.to(tp.zeros(1, device="cpu:3"))  # like a tensor: its device and dtype
    assert m.weight.dtype == jnp.float32 and _on(m.bias) == CPU[3]
    assert m.cpu() is m and {_on(p) for p in m.parameters()} == {CPU[0]}
    with pytest.raises(RuntimeError, match=r"Module.to: device 'cuda' is not available here"):
        m.cuda()
