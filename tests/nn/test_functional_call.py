"""The JAX bridge: parameters as a pytree, functional_call under grad/jit/vmap, optax loops."""

import threading

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import tensorplay_jax as tp
from tensorplay_jax import nn
from tensorplay_jax.nn import functional as F


def _mlp():
    tp.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.LayerNorm(16), nn.Linear(16, 3))


def _data(n=32, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32) + (x[:, 1] > 0).astype(np.int32)
    return x, y


def test_functional_call_grads_equal_tape_grads():
    model = _mlp()
    x, y = _data()
    params = nn.get_parameters(model)
    assert set(params) == {"0.weight", "0.bias", "2.weight", "2.bias", "3.weight", "3.bias"}

    def loss_fn(p):
        logits = nn.functional_call(model, p, x)
        assert isinstance(logits, jax.Array)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    value, grads = jax.jit(jax.value_and_grad(loss_fn))(params)
    loss = F.cross_entropy(model(tp.tensor(x)), tp.tensor(y))
    loss.backward()
    np.testing.assert_allclose(value, loss.item(), rtol=1e-5)
    for name, p in model.named_parameters():
        np.testing.assert_allclose(grads[name], p.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_optax_training_loop_in_plain_jax():
    model = _mlp()
    x, y = _data(64)
    params = nn.get_parameters(model)
    before = {k: np.asarray(v) for k, v in params.items()}
    opt = optax.adam(1e-2)
    opt_state = opt.init(params)

    @jax.jit
    def step(params, opt_state, x, y):
        def loss_fn(p):
            logits = nn.functional_call(model, p, x)
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    losses = []
    for _ in range(60):
        params, opt_state, loss = step(params, opt_state, x, y)
        losses.append(float(loss))
    assert losses[-1] < 0.5 * losses[0]
    # the module itself is untouched until the trained values are loaded back
    for k, v in nn.get_parameters(model).items():
        np.testing.assert_array_equal(np.asarray(v), before[k])
    model.load_state_dict(params)
    with tp.no_grad():
        acc = (model(tp.tensor(x)).argmax(1) == tp.tensor(y)).float().mean().item()
    assert acc > 0.8


def test_functional_call_under_vmap_and_partial_params():
    model = nn.Linear(3, 2)
    w = jnp.ones((2, 3))
    out = nn.functional_call(model, {"weight": w}, jnp.ones((5, 3)))
    np.testing.assert_allclose(out, 3 + model.bias.numpy()[None].repeat(5, 0), rtol=1e-6)
    ws = jnp.stack([w, 2 * w])
    outs = jax.vmap(lambda w: nn.functional_call(model, {"weight": w}, jnp.ones(3)))(ws)
    assert outs.shape == (2, 2)
    with pytest.raises(KeyError, match="'nope' is not a parameter or buffer of Linear"):
        nn.functional_call(model, {"nope": w}, jnp.ones(3))
    with pytest.raises(KeyError, match="strict=True"):
        nn.functional_call(model, {"weight": w}, jnp.ones(3), strict=True)


def test_dropout_keys_inside_jit():
    model = nn.Sequential(nn.Dropout(0.5))
    x = jnp.ones((1000,))
    f = jax.jit(lambda k: nn.functional_call(model, {}, x, rng=k))
    a, b = f(jax.random.key(0)), f(jax.random.key(1))
    assert not np.array_equal(a, b)
    assert set(np.unique(np.asarray(a))) <= {0.0, 2.0} and 0.4 < float((a == 0).mean()) < 0.6
    np.testing.assert_array_equal(f(jax.random.key(0)), a)
    with pytest.raises(ValueError, match=r"pass rng=key to nn\.functional_call"):
        jax.jit(lambda x: nn.functional_call(model, {}, x))(x)
    model.eval()
    np.testing.assert_array_equal(jax.jit(lambda x: nn.functional_call(model, {}, x))(x), x)


def test_dropout_eager_uses_manual_seed():
    drop = nn.Dropout(0.5)
    tp.manual_seed(7)
    a = drop(tp.ones(100)).numpy()
    tp.manual_seed(7)
    np.testing.assert_array_equal(drop(tp.ones(100)).numpy(), a)
    x = tp.ones(100, requires_grad=True)
    drop(x).sum().backward()
    assert set(np.unique(x.grad.numpy())) <= {0.0, 2.0}


def test_overlay_is_per_thread():
    model = nn.Linear(2, 1, bias=False)
    original = model.weight.numpy().copy()
    seen = {}
    inside = threading.Event()
    release = threading.Event()

    class Spy(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = model

        def forward(self, x):
            inside.set()
            release.wait(5)
            return self.inner(x)

    t = threading.Thread(
        target=lambda: seen.setdefault(
            "out", nn.functional_call(Spy(), {"inner.weight": jnp.zeros((1, 2))}, jnp.ones(2))
        )
    )
    t.start()
    inside.wait(5)
    seen["other_thread_weight"] = model.weight.numpy().copy()  # not overlaid here
    release.set()
    t.join()
    np.testing.assert_array_equal(seen["other_thread_weight"], original)
    np.testing.assert_array_equal(seen["out"], [0.0])


def test_each_layer_forward_is_one_node():
    x = tp.randn(2, 3, 8, 8, requires_grad=True)
    for layer, inp in [
        (nn.Linear(8, 4), x),
        (nn.Conv2d(3, 4, 3), x),
        (nn.LayerNorm(8), x),
        (nn.Dropout(0.2), x),
        (nn.Embedding(5, 3), tp.tensor([1, 2])),
    ]:
        out = layer(inp)
        edges = out.grad_fn.next_edges
        targets = {id(e.node) for e in edges if e is not None}
        # every edge goes straight to a leaf sink (the input or a parameter): one node
        assert all(type(e.node).__name__ == "AccumulateGrad" for e in edges), layer
        assert len(targets) == len(edges)


def test_module_training_step_does_not_retrace():
    from tensorplay_jax.autograd import trace_counts
    from tensorplay_jax.autograd.speedups._fused import FUSE_AFTER

    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.LayerNorm(8), nn.Linear(8, 3))
    x, y = _data(16)

    def step():
        net.zero_grad()
        F.cross_entropy(net(tp.tensor(x)), tp.tensor(y)).backward()

    for _ in range(FUSE_AFTER):  # warm up, up to the fused backward of a recurring graph
        step()
    before = trace_counts()
    for _ in range(3):
        step()
    assert trace_counts() == before
