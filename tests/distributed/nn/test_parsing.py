"""remote_device parsing and @interface, without RPC (examples: tests/test_doctests.py)."""

from __future__ import annotations

import pytest

from tensorplay_jax.distributed.nn import RemoteModule
from tensorplay_jax.distributed.nn.api import _interface, interface, parse_remote_device
from tensorplay_jax.distributed.nn.api._device import RemoteDevice


@pytest.mark.parametrize(
    "text, expected",
    [
        ("worker1/cpu", RemoteDevice("worker1", None, "cpu")),
        ("worker1", RemoteDevice("worker1", None, "cpu")),
        ("rank:1/cpu", RemoteDevice(None, 1, "cpu")),
        ("rank:12", RemoteDevice(None, 12, "cpu")),
        ("ps/cuda:0", RemoteDevice("ps", None, "cuda:0")),
        ("trainer-0.a/gpu:3", RemoteDevice("trainer-0.a", None, "gpu:3")),
        ("w/tpu", RemoteDevice("w", None, "tpu")),
        ("w/cpu:2", RemoteDevice("w", None, "cpu:2")),
    ],
)
def test_parse_remote_device(text, expected):
    got = parse_remote_device(text)
    assert got == expected
    assert got.destination == (expected.worker if expected.worker else expected.rank)


@pytest.mark.parametrize(
    "text, exc, substrings",
    [
        ("", ValueError, ["remote_device=''", "is empty", "'worker/device'"]),
        ("   ", ValueError, ["is empty"]),
        ("a/b/c", ValueError, ["remote_device='a/b/c'", "2 '/' separators", "'worker1/cpu'"]),
        ("worker1/xpu", ValueError, ["unknown device type 'xpu'", "cpu, cuda, gpu, tpu"]),
        ("worker1/cuda:x", ValueError, ["unknown device type 'cuda:x'"]),
        ("worker1/CPU", ValueError, ["unknown device type 'CPU'"]),
        ("/cpu", ValueError, ["names no worker"]),
        ("worker1/", ValueError, ["names no device", "'worker1/cpu'"]),
        ("rank:/cpu", ValueError, ["bad rank 'rank:'", "'rank:N'"]),
        ("rank:-1/cpu", ValueError, ["bad rank 'rank:-1'"]),
        (3, TypeError, ["remote_device=3 must be a string"]),
    ],
)
def test_parse_errors(text, exc, substrings):
    with pytest.raises(exc) as info:
        parse_remote_device(text)
    for s in substrings:
        assert s in str(info.value)


@pytest.mark.parametrize("text", ["", "a/b/c", "w/xpu"])
def test_constructor_rejects_bad_device_before_any_rpc(text):
    import tensorplay_jax as tp

    with pytest.raises(ValueError, match="RemoteModule: remote_device="):
        RemoteModule(text, tp.nn.Linear, args=(2, 2))


def test_constructor_without_rpc():
    import tensorplay_jax as tp
    from tensorplay_jax.rpc import RpcNotInitializedError

    with pytest.raises(RpcNotInitializedError):
        RemoteModule("worker1/cpu", tp.nn.Linear, args=(2, 2))


def test_interface_marks_public_methods():
    @interface
    class Iface:
        def forward(self, x): ...

        def reset(self): ...

        def _private(self): ...

        attr = 3

    assert _interface.interface_methods(Iface) == ("forward", "reset")


def test_interface_errors():
    with pytest.raises(TypeError, match="interface: expected a class"):
        interface(lambda self: None)
    with pytest.raises(TypeError, match="declares no public method"):

        @interface
        class Empty:
            x = 1

    class Plain:
        def forward(self, x): ...

    with pytest.raises(TypeError, match="is not an interface"):
        _interface.interface_methods(Plain)

    @interface
    class Child(Plain):  # methods are those its own body declares
        def reset(self): ...

    assert _interface.interface_methods(Child) == ("reset",)


def test_check_implements():
    @interface
    class Iface:
        def forward(self, x, *, shift=0.0): ...

    class Good:
        def forward(self, x, shift=0.0): ...

    class Star:
        def forward(self, *args, **kwargs): ...

    class Missing:
        pass

    class Renamed:
        def forward(self, y, shift=0.0): ...

    class NotCallable:
        forward = 3

    _interface.check_implements(Good(), Iface)
    _interface.check_implements(Star(), Iface)
    for bad, text in [
        (Missing(), "does not implement method `forward`"),
        (NotCallable(), "does not implement method `forward`"),
        (Renamed(), "has no parameter 'x'"),
    ]:
        with pytest.raises(TypeError, match=text):
            _interface.check_implements(bad, Iface)
