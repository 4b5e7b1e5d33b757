"""tensorplay_jax: the tensorplay.distributed family on JAX, RPC over pluggable transports."""

import importlib as _importlib
import sys as _sys
import types as _types

import jax.numpy as _jnp

from tensorplay_jax import autograd as autograd
from tensorplay_jax import collectives as collectives
from tensorplay_jax import distributions as distributions
from tensorplay_jax import futures as futures
from tensorplay_jax import nn as nn
from tensorplay_jax import tensors as tensors
from tensorplay_jax import utils as utils
from tensorplay_jax.autograd import apply as apply
from tensorplay_jax.autograd import compile as compile
from tensorplay_jax.autograd import enable_grad as enable_grad
from tensorplay_jax.autograd import inference_mode as inference_mode
from tensorplay_jax.autograd import is_grad_enabled as is_grad_enabled
from tensorplay_jax.autograd import (
    lift as function,  # @tp.function (autograd.function is torch's module)
)
from tensorplay_jax.autograd import no_grad as no_grad
from tensorplay_jax.autograd import set_grad_enabled as set_grad_enabled

# Distributed autograd plugs into RPC (the Tensor wire type, its hooks) when it is
# imported, and the RPC layer imports none of its plug-ins: importing it here puts it
# in place in every process that can send or serve an RPC, before the first call,
# whatever that worker imported itself (a callee that only imported rpc still decodes
# Tensors and records autograd).
from tensorplay_jax.distributed import autograd as _distributed_autograd  # noqa: F401
from tensorplay_jax.runtime import accelerator as accelerator
from tensorplay_jax.runtime import compile_cache as _compile_cache
from tensorplay_jax.runtime import cuda as cuda
from tensorplay_jax.runtime.device import device as device
from tensorplay_jax.tensors import *  # noqa: F403  (the tensor library's __all__ is tp's)

# ``import tensorplay_jax.linalg`` / ``from tensorplay_jax.linalg import norm``, as with
# torch.linalg: the module lives in the tensor library (tensors/linalg.py).
_sys.modules[__name__ + ".linalg"] = tensors.linalg
_sys.modules[__name__ + ".sparse"] = tensors.sparse


class _Deferred(_types.ModuleType):
    """A module name served by another module, imported on first attribute access."""

    def __init__(self, name: str, target: str) -> None:
        super().__init__(name, f"{target}, under the name {name}")
        self._target = target

    def __getattr__(self, attr: str) -> object:
        return getattr(_importlib.import_module(self._target), attr)


# ``tensorplay_jax.nn.parallel`` (torch.nn.parallel): DDP stands on process groups, a
# layer above nn/, so it lives in distributed/parallel and is served under nn here
# (loaded when first used: a worker that never builds a DDP module does not import it).
nn.parallel = _sys.modules[__name__ + ".nn.parallel"] = _Deferred(
    __name__ + ".nn.parallel", "tensorplay_jax.distributed.parallel"
)

# dtypes, as tensorplay spells them (JAX/NumPy dtype objects)
float16 = _jnp.float16
bfloat16 = _jnp.bfloat16
float32 = _jnp.float32
float64 = _jnp.float64
double = _jnp.float64  # float64 needs JAX's 64-bit mode: see tensorplay_jax.runtime.x64
half = _jnp.float16
int8 = _jnp.int8
int16 = _jnp.int16
short = _jnp.int16
uint8 = _jnp.uint8
int32 = _jnp.int32
int64 = _jnp.int64
long = _jnp.int64  # int64 too: JAX keeps 64-bit integers in its 64-bit mode only
bool_ = _jnp.bool_
complex64 = cfloat = _jnp.complex64
complex128 = cdouble = _jnp.complex128  # needs JAX's 64-bit mode, as float64

__version__ = "0.1.0"
_BUILTIN_NAMED_DTYPES = {"float": _jnp.float32, "int": _jnp.int32, "bool": _jnp.bool_}


def __getattr__(name: str) -> object:
    # ``tp.optim`` (and optax under it) loads on first use: a worker process that
    # never steps an optimizer does not pay for importing it.
    if name == "optim":
        import importlib

        return importlib.import_module("tensorplay_jax.optim")
    # tensorplay's ``tp.float`` / ``tp.int`` / ``tp.bool`` (float32 / int32 / bool), served
    # here so that the builtins keep their names inside this module
    if name in _BUILTIN_NAMED_DTYPES:
        return _BUILTIN_NAMED_DTYPES[name]
    raise AttributeError(f"module 'tensorplay_jax' has no attribute {name!r}")


__all__ = [
    "accelerator",
    "apply",
    "autograd",
    "bfloat16",
    "bool_",
    "cdouble",
    "cfloat",
    "collectives",
    "complex64",
    "complex128",
    "compile",
    "cuda",
    "device",
    "distributions",
    "double",
    "enable_grad",
    "float16",
    "float32",
    "float64",
    "function",
    "futures",
    "half",
    "int8",
    "int16",
    "int32",
    "int64",
    "is_grad_enabled",
    "long",
    "nn",
    "inference_mode",
    "no_grad",
    "optim",  # noqa: F405  (loaded on first use by __getattr__)
    "set_grad_enabled",
    "short",
    "tensors",
    "uint8",
    *tensors.__all__,
]

# The per-user JAX compilation cache (runtime.compile_cache), before this process compiles
# anything of ours: importing the package compiles nothing.
_compile_cache.configure()
