"""Module mechanics: registration, traversal, state_dict round trips, modes, grads, hooks, repr."""

from collections import OrderedDict

import jax
import numpy as np
import pytest

import tensorplay_jax as tp
from tensorplay_jax import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 4)
        self.scale = nn.Parameter(tp.ones(4))
        self.register_buffer("running", tp.zeros(4))
        self.register_buffer("scratch", tp.zeros(1), persistent=False)
        self.act = nn.Tanh()
        self.not_a_param = tp.ones(2)  # a plain Tensor attribute

    def forward(self, x):
        return self.act(self.fc(x)) * self.scale + self.running


def test_registration_and_traversal():
    b = Block()
    assert [n for n, _ in b.named_parameters()] == ["scale", "fc.weight", "fc.bias"]
    assert all(p.requires_grad and p.is_leaf for p in b.parameters())
    assert [n for n, _ in b.named_buffers()] == ["running", "scratch"]
    assert [n for n, _ in b.named_modules()] == ["", "fc", "act"]
    assert [type(m).__name__ for m in b.children()] == ["Linear", "Tanh"]
    assert "not_a_param" not in dict(b.named_parameters())
    assert list(b.state_dict()) == ["scale", "running", "fc.weight", "fc.bias"]
    assert "fc" in dir(b)
    with pytest.raises(AttributeError, match="has no attribute 'missing'"):
        b.missing  # noqa: B018


def test_assignment_rules():
    b = Block()
    with pytest.raises(TypeError, match="cannot assign 'Tensor' as parameter 'scale'"):
        b.scale = tp.ones(4)
    b.scale = None
    assert "scale" not in dict(b.named_parameters())
    with pytest.raises(TypeError, match="as child module 'fc'"):
        b.fc = 3
    b.extra = nn.Linear(1, 1)
    assert "extra.weight" in dict(b.named_parameters())
    del b.extra
    assert "extra.weight" not in dict(b.named_parameters())

    class Early(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(tp.ones(1))

    with pytest.raises(AttributeError, match=r"before Module\.__init__"):
        Early()


def test_shared_parameters_listed_once():
    lin = nn.Linear(2, 2)
    seq = nn.Sequential(lin, nn.ReLU(), lin)
    assert len(list(seq.parameters())) == 2
    seq(tp.ones(1, 2)).sum().backward()
    assert lin.weight.grad is not None


def test_state_dict_round_trip_and_errors():
    tp.manual_seed(0)
    a, b = Block(), Block()
    sd = a.state_dict()
    assert all(not v.requires_grad for v in sd.values())
    weight_before = b.fc.weight
    result = b.load_state_dict(sd)
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert b.fc.weight is weight_before and b.fc.weight.requires_grad  # identity kept
    for k, v in sd.items():
        np.testing.assert_array_equal(b.state_dict()[k].numpy(), v.numpy())
    # arrays are accepted too
    b.load_state_dict({k: np.asarray(v.numpy()) for k, v in sd.items()})

    bad = dict(sd)
    bad["fc.weight"] = tp.zeros(5, 5)
    with pytest.raises(RuntimeError, match=r"size mismatch for fc.weight: copying a param with"):
        b.load_state_dict(bad)
    partial = {k: v for k, v in sd.items() if k != "fc.bias"}
    partial["bogus"] = tp.zeros(1)
    with pytest.raises(RuntimeError, match=r'Missing key.*"fc\.bias"') as err:
        b.load_state_dict(partial)
    assert 'Unexpected key(s) in state_dict: "bogus"' in str(err.value)
    res = b.load_state_dict(partial, strict=False)
    assert res.missing_keys == ["fc.bias"] and res.unexpected_keys == ["bogus"]


def test_train_eval_zero_grad_requires_grad():
    net = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5))
    assert net.training and net[1].training
    net.eval()
    assert not net.training and not net[1].training
    net.train()
    assert net[1].training
    net(tp.ones(3, 2)).sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    net.zero_grad(set_to_none=False)
    assert all(float(p.grad.abs().sum()) == 0 for p in net.parameters())
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())
    net.requires_grad_(False)
    assert not any(p.requires_grad for p in net.parameters())


def test_to_dtype_apply_and_hooks():
    net = nn.Sequential(nn.Linear(2, 3))
    net.to(tp.float16)
    assert net[0].weight.dtype == np.float16 and net[0].weight.requires_grad
    net.float()
    seen = []
    net.apply(lambda m: seen.append(type(m).__name__))
    assert seen == ["Linear", "Sequential"]
    pre = net.register_forward_pre_hook(lambda m, args: (args[0] * 0,))
    post = net.register_forward_hook(lambda m, args, out: out + 1)
    out = net(tp.ones(1, 2))
    np.testing.assert_allclose(out.numpy(), net[0].bias.numpy()[None] + 1, rtol=1e-6)
    pre.remove()
    post.remove()
    pre.remove()  # idempotent
    assert not np.allclose(net(tp.ones(1, 2)).numpy(), out.numpy())


def test_containers_and_repr():
    seq = nn.Sequential(OrderedDict([("inp", nn.Linear(2, 3)), ("act", nn.ReLU())]))
    assert [n for n, _ in seq.named_children()] == ["inp", "act"]
    assert len(seq) == 2 and isinstance(seq[-1], nn.ReLU) and len(seq[:1]) == 1
    seq.append(nn.Flatten())
    assert len(seq) == 3
    ml = nn.ModuleList([nn.Linear(1, 1), nn.Linear(1, 1)])
    assert len(list(ml.parameters())) == 4 and isinstance(ml[1], nn.Linear)
    md = nn.ModuleDict({"a": nn.ReLU()})
    md["b"] = nn.Linear(1, 2)
    assert list(md) == ["a", "b"] and len(list(md.parameters())) == 2
    assert repr(nn.Sequential(nn.Linear(2, 3, bias=False), nn.ReLU())) == (
        "Sequential(\n  (0): Linear(in_features=2, out_features=3, bias=False)\n  (1): ReLU()\n)"
    )
    assert repr(nn.Conv2d(1, 2, 3, padding=1)) == (
        "Conv2d(1, 2, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))"
    )
    assert repr(nn.Parameter(tp.zeros(1))).startswith("Parameter containing:\ntensor([0.]")


def test_forward_not_implemented():
    with pytest.raises(NotImplementedError, match='missing the required "forward"'):
        nn.Module()(1)


def test_deepcopy_module_gives_independent_parameters():
    import copy

    net = nn.Sequential(nn.Linear(2, 2))
    twin = copy.deepcopy(net)
    assert isinstance(twin[0].weight, nn.Parameter) and twin[0].weight is not net[0].weight
    np.testing.assert_array_equal(twin[0].weight.numpy(), net[0].weight.numpy())
    twin(tp.ones(1, 2)).sum().backward()
    assert twin[0].weight.grad is not None and net[0].weight.grad is None


def test_train_asks_each_child_to_switch_itself():
    # tensorplay semantics: train()/eval() call each child's own train(), so a child that
    # overrides it (a RemoteModule handle switches its remote module) is honoured.
    calls = []

    class Recording(nn.Module):
        def train(self, mode: bool = True):
            calls.append(mode)
            return super().train(mode)

    net = nn.Sequential(nn.Linear(2, 2), nn.Sequential(Recording()))
    net.eval()
    net.train()
    assert calls == [False, True]
    assert net[1][0].training


def test_to_the_device_the_values_are_on_keeps_them_as_they_are():
    # As Tensor.to: a move would commit each value to the device, and JAX compiles
    # a program again for arguments that differ only in that.
    net = Block()
    values = [t.value for t in [*net.parameters(), *net.buffers()]]
    assert net.to("cpu") is net  # cpu:0, where tp.ones/zeros put them
    kept = [t.value for t in [*net.parameters(), *net.buffers()]]
    assert all(a is b for a, b in zip(values, kept, strict=True))
    assert not any(v.committed for v in kept)
    other = jax.devices("cpu")[1]
    net.to(other)  # another device: moved there, committed
    moved = [t.value for t in [*net.parameters(), *net.buffers()]]
    assert all(v.committed and v.devices() == {other} for v in moved)
