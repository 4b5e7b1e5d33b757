"""RPC backends by name (``rpc.backend_registry``): registering one, and ``init_rpc``
starting the agent its handler makes, with options of the backend's own class.

No RPC runs here: the backend below makes an agent that refuses to start, so
``init_rpc`` is seen handing the call to the registered handler and cleaning up.
"""

from __future__ import annotations

import uuid

import pytest

from tensorplay_jax.distributed import rpc


class _Options(rpc.RpcBackendOptions):
    """A backend's own options: not ``TensorPipeRpcBackendOptions``."""

    def __init__(self, rpc_timeout: float, init_method: str, colour: str = "blue") -> None:
        self.rpc_timeout, self.init_method, self.colour = rpc_timeout, init_method, colour


class _Refused(Exception):
    pass


class _Agent:
    def __init__(self, *args: object) -> None:
        self.args = args
        MADE.append(self)

    def start(self) -> None:
        raise _Refused("this test's backend starts nothing")


MADE: list[_Agent] = []


def _register() -> rpc.BackendType:
    name = f"TEST_{uuid.uuid4().hex[:8].upper()}"
    return rpc.backend_registry.register_backend(name, _Options, _Agent)


def test_a_registered_backend_is_a_member_of_backend_type_everywhere():
    member = _register()
    name = member.name
    assert rpc.BackendType[name] is member is getattr(rpc.backend_registry.BackendType, name)
    assert member in list(rpc.BackendType) and rpc.backend_registry.backend_registered(name)
    opts = rpc.backend_registry.construct_rpc_backend_options(member, rpc_timeout=7, colour="red")
    assert (type(opts), opts.rpc_timeout, opts.colour) == (_Options, 7, "red")
    with pytest.raises(RuntimeError, match=rf"^RPC backend {name}: already registered$"):
        rpc.backend_registry.register_backend(name, _Options, _Agent)


def test_init_rpc_starts_the_agent_of_the_backend_it_is_given_with_its_own_options():
    member = _register()
    opts = rpc.backend_registry.construct_rpc_backend_options(member, init_method="env://")
    with pytest.raises(_Refused):
        rpc.init_rpc("solo", backend=member, rank=0, world_size=1, rpc_backend_options=opts)
    assert MADE[-1].args == ("solo", 0, 1, opts)
    assert not rpc.is_initialized()


def test_the_built_in_backend_still_refuses_options_of_another_class():
    opts = _Options(5.0, "env://")
    with pytest.raises(TypeError, match="must be a `TensorPipeRpcBackendOptions`"):
        rpc.init_rpc("solo", backend=rpc.BackendType.TENSORPIPE, rpc_backend_options=opts)
    with pytest.raises(TypeError, match="Could not infer backend"):
        rpc.init_rpc("solo", rank=0, world_size=1, rpc_backend_options=opts)
