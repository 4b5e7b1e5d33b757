"""tensorplay_jax: the tensorplay.distributed family rebuilt on JAX, with gRPC between workers."""

import jax.numpy as _jnp

from tensorplay_jax import autograd as autograd
from tensorplay_jax import collectives as collectives
from tensorplay_jax import nn as nn
from tensorplay_jax.autograd import Tensor as Tensor
from tensorplay_jax.autograd import apply as apply
from tensorplay_jax.autograd import enable_grad as enable_grad
from tensorplay_jax.autograd import function as function
from tensorplay_jax.autograd import is_grad_enabled as is_grad_enabled
from tensorplay_jax.autograd import no_grad as no_grad
from tensorplay_jax.autograd import set_grad_enabled as set_grad_enabled
from tensorplay_jax.autograd._factories import arange as arange
from tensorplay_jax.autograd._factories import eye as eye
from tensorplay_jax.autograd._factories import full as full
from tensorplay_jax.autograd._factories import ones as ones
from tensorplay_jax.autograd._factories import ones_like as ones_like
from tensorplay_jax.autograd._factories import rand as rand
from tensorplay_jax.autograd._factories import randint as randint
from tensorplay_jax.autograd._factories import randn as randn
from tensorplay_jax.autograd._factories import randn_like as randn_like
from tensorplay_jax.autograd._factories import tensor as tensor
from tensorplay_jax.autograd._factories import zeros as zeros
from tensorplay_jax.autograd._factories import zeros_like as zeros_like
from tensorplay_jax.autograd._ops import abs as abs
from tensorplay_jax.autograd._ops import add as add
from tensorplay_jax.autograd._ops import allclose as allclose
from tensorplay_jax.autograd._ops import clamp as clamp
from tensorplay_jax.autograd._ops import cos as cos
from tensorplay_jax.autograd._ops import div as div
from tensorplay_jax.autograd._ops import eq as eq
from tensorplay_jax.autograd._ops import exp as exp
from tensorplay_jax.autograd._ops import ge as ge
from tensorplay_jax.autograd._ops import gt as gt
from tensorplay_jax.autograd._ops import le as le
from tensorplay_jax.autograd._ops import log as log
from tensorplay_jax.autograd._ops import log_softmax as log_softmax
from tensorplay_jax.autograd._ops import lt as lt
from tensorplay_jax.autograd._ops import matmul as matmul
from tensorplay_jax.autograd._ops import maximum as maximum
from tensorplay_jax.autograd._ops import minimum as minimum
from tensorplay_jax.autograd._ops import mul as mul
from tensorplay_jax.autograd._ops import ne as ne
from tensorplay_jax.autograd._ops import neg as neg
from tensorplay_jax.autograd._ops import pow as pow
from tensorplay_jax.autograd._ops import relu as relu
from tensorplay_jax.autograd._ops import sigmoid as sigmoid
from tensorplay_jax.autograd._ops import sin as sin
from tensorplay_jax.autograd._ops import softmax as softmax
from tensorplay_jax.autograd._ops import sqrt as sqrt
from tensorplay_jax.autograd._ops import square as square
from tensorplay_jax.autograd._ops import sub as sub
from tensorplay_jax.autograd._ops import tanh as tanh
from tensorplay_jax.autograd._ops import where as where
from tensorplay_jax.autograd._random import initial_seed as initial_seed
from tensorplay_jax.autograd._random import manual_seed as manual_seed
from tensorplay_jax.autograd._reductions import amax as amax
from tensorplay_jax.autograd._reductions import amin as amin
from tensorplay_jax.autograd._reductions import argmax as argmax
from tensorplay_jax.autograd._reductions import argmin as argmin
from tensorplay_jax.autograd._reductions import logsumexp as logsumexp
from tensorplay_jax.autograd._reductions import max as max
from tensorplay_jax.autograd._reductions import mean as mean
from tensorplay_jax.autograd._reductions import min as min
from tensorplay_jax.autograd._reductions import prod as prod
from tensorplay_jax.autograd._reductions import std as std
from tensorplay_jax.autograd._reductions import sum as sum
from tensorplay_jax.autograd._reductions import var as var
from tensorplay_jax.autograd._shape_ops import cat as cat
from tensorplay_jax.autograd._shape_ops import chunk as chunk
from tensorplay_jax.autograd._shape_ops import expand as expand
from tensorplay_jax.autograd._shape_ops import flatten as flatten
from tensorplay_jax.autograd._shape_ops import narrow as narrow
from tensorplay_jax.autograd._shape_ops import permute as permute
from tensorplay_jax.autograd._shape_ops import reshape as reshape
from tensorplay_jax.autograd._shape_ops import split as split
from tensorplay_jax.autograd._shape_ops import squeeze as squeeze
from tensorplay_jax.autograd._shape_ops import stack as stack
from tensorplay_jax.autograd._shape_ops import transpose as transpose
from tensorplay_jax.autograd._shape_ops import unbind as unbind
from tensorplay_jax.autograd._shape_ops import unsqueeze as unsqueeze
from tensorplay_jax.autograd._shape_ops import view as view

# Distributed autograd plugs into RPC (the Tensor wire type, its hooks) when it is
# imported, and the RPC layer imports none of its plug-ins: importing it here puts it
# in place in every process that can send or serve an RPC, before the first call,
# whatever that worker imported itself (a callee that only imported rpc still decodes
# Tensors and records autograd).
from tensorplay_jax.distributed import autograd as _distributed_autograd  # noqa: F401

# dtypes, as tensorplay spells them (JAX/NumPy dtype objects)
float16 = _jnp.float16
bfloat16 = _jnp.bfloat16
float32 = _jnp.float32
float64 = _jnp.float64
int32 = _jnp.int32
int64 = _jnp.int64
bool_ = _jnp.bool_

__version__ = "0.1.0"

__all__ = [
    "Tensor",
    "abs",
    "add",
    "allclose",
    "amax",
    "amin",
    "apply",
    "arange",
    "argmax",
    "argmin",
    "autograd",
    "bfloat16",
    "bool_",
    "cat",
    "chunk",
    "clamp",
    "collectives",
    "cos",
    "div",
    "enable_grad",
    "eq",
    "exp",
    "expand",
    "eye",
    "flatten",
    "float16",
    "float32",
    "float64",
    "full",
    "function",
    "ge",
    "gt",
    "initial_seed",
    "int32",
    "int64",
    "is_grad_enabled",
    "le",
    "log",
    "log_softmax",
    "logsumexp",
    "lt",
    "manual_seed",
    "matmul",
    "max",
    "maximum",
    "mean",
    "min",
    "minimum",
    "mul",
    "nn",
    "narrow",
    "ne",
    "neg",
    "no_grad",
    "ones",
    "ones_like",
    "permute",
    "pow",
    "prod",
    "rand",
    "randint",
    "randn",
    "randn_like",
    "relu",
    "reshape",
    "set_grad_enabled",
    "sigmoid",
    "sin",
    "softmax",
    "split",
    "sqrt",
    "square",
    "squeeze",
    "stack",
    "std",
    "sub",
    "sum",
    "tanh",
    "tensor",
    "transpose",
    "unbind",
    "unsqueeze",
    "var",
    "view",
    "where",
    "zeros",
    "zeros_like",
]
