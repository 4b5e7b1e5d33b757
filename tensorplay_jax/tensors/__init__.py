"""The tensor library: ``Tensor``, its operations, factories and the random state.

What it owns
------------
* ``Tensor`` (``_tensor``): a ``jax.Array`` with ``requires_grad``, ``grad`` and
  its place on the tape; the methods with real bodies. Operators and the math,
  reduction and shape methods are attached from one table (``_methods``).
* The operations, each one recorded node: elementwise and activations
  (``_ops``), reductions (``_reductions``), shapes, joining, splitting, flips and
  repeats (``_shape_ops``), indexing (``_indexing``), reads at indices along a
  dimension (``_gathers``), scans and sorting (``_scans_and_sorts``), matrix parts
  and products (``_matrix_ops``) and the in-place methods with the scatters
  (``_inplace``). Views and in-place writes (a write reaches the Tensor's base
  and views, as torch's storage does) are ``_views``.
* Factories (``tensor``, ``randn``, ``zeros`` ... in ``_factories``), the
  process-wide random state (``manual_seed``) in ``_random`` and the
  ``Generator`` (a random state of its own, ``generator=``) in ``_generator``.
* Sparse COO tensors: ``SparseTensor`` and ``sparse_coo_tensor`` (``_sparse``), their
  operations (``_sparse_ops``) and ``tp.sparse`` (``sparse``, public-named).
* ``linalg`` (``tp.linalg``: ``multi_dot``, norms, ``inv``, ``solve``, ``det``) and
  ``serialization`` (``tp.save``/``tp.load``), public-named modules.

``__all__`` is what ``tensorplay_jax`` re-exports as ``tp.*``. ``next_key``,
``key_scope`` and ``in_key_scope`` are also importable from here, for
``tensorplay_jax.nn`` (random draws inside modules and ``functional_call``),
and ``overwrite`` (an optimiser's unrecorded write of a new value, version
bumped, seen by views) for ``tensorplay_jax.optim``; they are not part of ``tp``.
* The registration that makes JAX reject a Tensor clearly (``_interop``).

What it may import
------------------
JAX, NumPy, ``tensorplay_jax.runtime`` and the public names of
``tensorplay_jax.autograd`` (the lower layer: ``call_op`` records an operation,
plus grad mode, ``GradientEdge``/``AccumulateGrad`` and ``run_backward``).
Nothing in ``autograd`` imports this package; this package hands the tape its
``Tensor`` class (``autograd.set_tensor_class``) when it is imported.

Example:
    >>> import tensorplay_jax.tensors as tt
    >>> x = tt.tensor([1.0, 2.0], requires_grad=True)
    >>> tt.sum(x * x).backward()
    >>> x.grad
    tensor([2., 4.])
"""

from tensorplay_jax.autograd import set_tensor_class as _set_tensor_class
from tensorplay_jax.tensors import _interop as _interop
from tensorplay_jax.tensors import linalg as linalg
from tensorplay_jax.tensors import sparse as sparse
from tensorplay_jax.tensors._factories import DoubleTensor as DoubleTensor
from tensorplay_jax.tensors._factories import FloatTensor as FloatTensor
from tensorplay_jax.tensors._factories import LongTensor as LongTensor
from tensorplay_jax.tensors._factories import arange as arange
from tensorplay_jax.tensors._factories import as_tensor as as_tensor
from tensorplay_jax.tensors._factories import empty as empty
from tensorplay_jax.tensors._factories import empty_like as empty_like
from tensorplay_jax.tensors._factories import eye as eye
from tensorplay_jax.tensors._factories import from_numpy as from_numpy
from tensorplay_jax.tensors._factories import full as full
from tensorplay_jax.tensors._factories import full_like as full_like
from tensorplay_jax.tensors._factories import linspace as linspace
from tensorplay_jax.tensors._factories import logspace as logspace
from tensorplay_jax.tensors._factories import ones as ones
from tensorplay_jax.tensors._factories import ones_like as ones_like
from tensorplay_jax.tensors._factories import rand as rand
from tensorplay_jax.tensors._factories import rand_like as rand_like
from tensorplay_jax.tensors._factories import randint as randint
from tensorplay_jax.tensors._factories import randint_like as randint_like
from tensorplay_jax.tensors._factories import randn as randn
from tensorplay_jax.tensors._factories import randn_like as randn_like
from tensorplay_jax.tensors._factories import randperm as randperm
from tensorplay_jax.tensors._factories import tensor as tensor
from tensorplay_jax.tensors._factories import zeros as zeros
from tensorplay_jax.tensors._factories import zeros_like as zeros_like
from tensorplay_jax.tensors._gathers import gather as gather
from tensorplay_jax.tensors._gathers import index_add as index_add
from tensorplay_jax.tensors._gathers import index_select as index_select
from tensorplay_jax.tensors._gathers import masked_select as masked_select
from tensorplay_jax.tensors._gathers import take_along_dim as take_along_dim
from tensorplay_jax.tensors._generator import Generator as Generator
from tensorplay_jax.tensors._indexing import nonzero as nonzero
from tensorplay_jax.tensors._inplace import addcdiv as addcdiv
from tensorplay_jax.tensors._inplace import addcmul as addcmul
from tensorplay_jax.tensors._inplace import lerp as lerp
from tensorplay_jax.tensors._inplace import masked_fill as masked_fill
from tensorplay_jax.tensors._inplace import scatter as scatter
from tensorplay_jax.tensors._inplace import scatter_add as scatter_add
from tensorplay_jax.tensors._matrix_ops import addmm as addmm
from tensorplay_jax.tensors._matrix_ops import cross as cross
from tensorplay_jax.tensors._matrix_ops import diag as diag
from tensorplay_jax.tensors._matrix_ops import diagonal as diagonal
from tensorplay_jax.tensors._matrix_ops import dot as dot
from tensorplay_jax.tensors._matrix_ops import einsum as einsum
from tensorplay_jax.tensors._matrix_ops import outer as outer
from tensorplay_jax.tensors._matrix_ops import trace as trace
from tensorplay_jax.tensors._matrix_ops import tril as tril
from tensorplay_jax.tensors._matrix_ops import triu as triu
from tensorplay_jax.tensors._methods import attach_methods as _attach_methods
from tensorplay_jax.tensors._ops import abs as abs
from tensorplay_jax.tensors._ops import acos as acos
from tensorplay_jax.tensors._ops import add as add
from tensorplay_jax.tensors._ops import allclose as allclose
from tensorplay_jax.tensors._ops import asin as asin
from tensorplay_jax.tensors._ops import atan as atan
from tensorplay_jax.tensors._ops import atan2 as atan2
from tensorplay_jax.tensors._ops import bmm as bmm
from tensorplay_jax.tensors._ops import ceil as ceil
from tensorplay_jax.tensors._ops import clamp as clamp
from tensorplay_jax.tensors._ops import clip as clip
from tensorplay_jax.tensors._ops import cos as cos
from tensorplay_jax.tensors._ops import cosh as cosh
from tensorplay_jax.tensors._ops import div as div
from tensorplay_jax.tensors._ops import eq as eq
from tensorplay_jax.tensors._ops import equal as equal
from tensorplay_jax.tensors._ops import erf as erf
from tensorplay_jax.tensors._ops import exp as exp
from tensorplay_jax.tensors._ops import expm1 as expm1
from tensorplay_jax.tensors._ops import floor as floor
from tensorplay_jax.tensors._ops import floor_divide as floor_divide
from tensorplay_jax.tensors._ops import fmod as fmod
from tensorplay_jax.tensors._ops import frac as frac
from tensorplay_jax.tensors._ops import ge as ge
from tensorplay_jax.tensors._ops import gt as gt
from tensorplay_jax.tensors._ops import isclose as isclose
from tensorplay_jax.tensors._ops import isfinite as isfinite
from tensorplay_jax.tensors._ops import isinf as isinf
from tensorplay_jax.tensors._ops import isnan as isnan
from tensorplay_jax.tensors._ops import le as le
from tensorplay_jax.tensors._ops import log as log
from tensorplay_jax.tensors._ops import log1p as log1p
from tensorplay_jax.tensors._ops import log2 as log2
from tensorplay_jax.tensors._ops import log10 as log10
from tensorplay_jax.tensors._ops import log_softmax as log_softmax
from tensorplay_jax.tensors._ops import logical_and as logical_and
from tensorplay_jax.tensors._ops import logical_not as logical_not
from tensorplay_jax.tensors._ops import logical_or as logical_or
from tensorplay_jax.tensors._ops import logical_xor as logical_xor
from tensorplay_jax.tensors._ops import lt as lt
from tensorplay_jax.tensors._ops import matmul as matmul
from tensorplay_jax.tensors._ops import maximum as maximum
from tensorplay_jax.tensors._ops import minimum as minimum
from tensorplay_jax.tensors._ops import mm as mm
from tensorplay_jax.tensors._ops import mul as mul
from tensorplay_jax.tensors._ops import nan_to_num as nan_to_num
from tensorplay_jax.tensors._ops import ne as ne
from tensorplay_jax.tensors._ops import neg as neg
from tensorplay_jax.tensors._ops import pow as pow
from tensorplay_jax.tensors._ops import reciprocal as reciprocal
from tensorplay_jax.tensors._ops import relu as relu
from tensorplay_jax.tensors._ops import remainder as remainder
from tensorplay_jax.tensors._ops import round as round
from tensorplay_jax.tensors._ops import rsqrt as rsqrt
from tensorplay_jax.tensors._ops import sigmoid as sigmoid
from tensorplay_jax.tensors._ops import sign as sign
from tensorplay_jax.tensors._ops import sin as sin
from tensorplay_jax.tensors._ops import sinh as sinh
from tensorplay_jax.tensors._ops import softmax as softmax
from tensorplay_jax.tensors._ops import sqrt as sqrt
from tensorplay_jax.tensors._ops import square as square
from tensorplay_jax.tensors._ops import sub as sub
from tensorplay_jax.tensors._ops import tanh as tanh
from tensorplay_jax.tensors._ops import trunc as trunc
from tensorplay_jax.tensors._ops import where as where
from tensorplay_jax.tensors._random import in_key_scope as in_key_scope
from tensorplay_jax.tensors._random import initial_seed as initial_seed
from tensorplay_jax.tensors._random import key_scope as key_scope
from tensorplay_jax.tensors._random import manual_seed as manual_seed
from tensorplay_jax.tensors._random import next_key as next_key
from tensorplay_jax.tensors._reductions import amax as amax
from tensorplay_jax.tensors._reductions import amin as amin
from tensorplay_jax.tensors._reductions import argmax as argmax
from tensorplay_jax.tensors._reductions import argmin as argmin
from tensorplay_jax.tensors._reductions import count_nonzero as count_nonzero
from tensorplay_jax.tensors._reductions import logsumexp as logsumexp
from tensorplay_jax.tensors._reductions import max as max
from tensorplay_jax.tensors._reductions import mean as mean
from tensorplay_jax.tensors._reductions import min as min
from tensorplay_jax.tensors._reductions import nanmean as nanmean
from tensorplay_jax.tensors._reductions import nansum as nansum
from tensorplay_jax.tensors._reductions import prod as prod
from tensorplay_jax.tensors._reductions import std as std
from tensorplay_jax.tensors._reductions import std_mean as std_mean
from tensorplay_jax.tensors._reductions import sum as sum
from tensorplay_jax.tensors._reductions import var as var
from tensorplay_jax.tensors._reductions import var_mean as var_mean
from tensorplay_jax.tensors._scans_and_sorts import argsort as argsort
from tensorplay_jax.tensors._scans_and_sorts import bincount as bincount
from tensorplay_jax.tensors._scans_and_sorts import bucketize as bucketize
from tensorplay_jax.tensors._scans_and_sorts import cumprod as cumprod
from tensorplay_jax.tensors._scans_and_sorts import cumsum as cumsum
from tensorplay_jax.tensors._scans_and_sorts import diff as diff
from tensorplay_jax.tensors._scans_and_sorts import kthvalue as kthvalue
from tensorplay_jax.tensors._scans_and_sorts import logcumsumexp as logcumsumexp
from tensorplay_jax.tensors._scans_and_sorts import median as median
from tensorplay_jax.tensors._scans_and_sorts import quantile as quantile
from tensorplay_jax.tensors._scans_and_sorts import searchsorted as searchsorted
from tensorplay_jax.tensors._scans_and_sorts import sort as sort
from tensorplay_jax.tensors._scans_and_sorts import topk as topk
from tensorplay_jax.tensors._scans_and_sorts import unique as unique
from tensorplay_jax.tensors._shape_ops import broadcast_tensors as broadcast_tensors
from tensorplay_jax.tensors._shape_ops import cat as cat
from tensorplay_jax.tensors._shape_ops import chunk as chunk
from tensorplay_jax.tensors._shape_ops import expand as expand
from tensorplay_jax.tensors._shape_ops import flatten as flatten
from tensorplay_jax.tensors._shape_ops import flip as flip
from tensorplay_jax.tensors._shape_ops import hstack as hstack
from tensorplay_jax.tensors._shape_ops import meshgrid as meshgrid
from tensorplay_jax.tensors._shape_ops import narrow as narrow
from tensorplay_jax.tensors._shape_ops import permute as permute
from tensorplay_jax.tensors._shape_ops import repeat_interleave as repeat_interleave
from tensorplay_jax.tensors._shape_ops import reshape as reshape
from tensorplay_jax.tensors._shape_ops import roll as roll
from tensorplay_jax.tensors._shape_ops import select as select
from tensorplay_jax.tensors._shape_ops import split as split
from tensorplay_jax.tensors._shape_ops import squeeze as squeeze
from tensorplay_jax.tensors._shape_ops import stack as stack
from tensorplay_jax.tensors._shape_ops import tensor_split as tensor_split
from tensorplay_jax.tensors._shape_ops import transpose as transpose
from tensorplay_jax.tensors._shape_ops import unbind as unbind
from tensorplay_jax.tensors._shape_ops import unsqueeze as unsqueeze
from tensorplay_jax.tensors._shape_ops import view as view
from tensorplay_jax.tensors._shape_ops import view_as_complex as view_as_complex
from tensorplay_jax.tensors._shape_ops import view_as_real as view_as_real
from tensorplay_jax.tensors._shape_ops import vstack as vstack
from tensorplay_jax.tensors._sparse import SparseTensor as SparseTensor
from tensorplay_jax.tensors._sparse import sparse_coo as sparse_coo
from tensorplay_jax.tensors._sparse import sparse_coo_tensor as sparse_coo_tensor
from tensorplay_jax.tensors._sparse import strided as strided
from tensorplay_jax.tensors._tensor import Tensor as Tensor
from tensorplay_jax.tensors._views import overwrite as overwrite
from tensorplay_jax.tensors.linalg import tensor_norm as norm
from tensorplay_jax.tensors.serialization import load as load
from tensorplay_jax.tensors.serialization import save as save

_attach_methods(Tensor)
_set_tensor_class(Tensor)

__all__ = [
    "abs",
    "acos",
    "add",
    "addcdiv",
    "addcmul",
    "addmm",
    "allclose",
    "amax",
    "amin",
    "arange",
    "argmax",
    "argmin",
    "argsort",
    "as_tensor",
    "asin",
    "atan",
    "atan2",
    "bincount",
    "bmm",
    "broadcast_tensors",
    "bucketize",
    "cat",
    "ceil",
    "chunk",
    "clamp",
    "clip",
    "cos",
    "cosh",
    "count_nonzero",
    "cross",
    "cumprod",
    "cumsum",
    "diag",
    "diagonal",
    "diff",
    "div",
    "dot",
    "einsum",
    "empty",
    "empty_like",
    "eq",
    "equal",
    "erf",
    "exp",
    "expand",
    "expm1",
    "eye",
    "flatten",
    "flip",
    "view_as_complex",
    "view_as_real",
    "FloatTensor",
    "floor",
    "floor_divide",
    "fmod",
    "frac",
    "from_numpy",
    "full",
    "full_like",
    "gather",
    "ge",
    "Generator",
    "gt",
    "hstack",
    "index_add",
    "index_select",
    "initial_seed",
    "isclose",
    "isfinite",
    "isinf",
    "isnan",
    "kthvalue",
    "le",
    "lerp",
    "linalg",
    "linspace",
    "load",
    "log",
    "log10",
    "log1p",
    "log2",
    "log_softmax",
    "logcumsumexp",
    "logical_and",
    "logical_not",
    "logical_or",
    "logical_xor",
    "logspace",
    "logsumexp",
    "LongTensor",
    "DoubleTensor",
    "lt",
    "manual_seed",
    "masked_fill",
    "masked_select",
    "matmul",
    "max",
    "maximum",
    "mean",
    "median",
    "meshgrid",
    "min",
    "minimum",
    "mm",
    "mul",
    "nan_to_num",
    "nanmean",
    "nansum",
    "narrow",
    "ne",
    "neg",
    "nonzero",
    "norm",
    "ones",
    "ones_like",
    "outer",
    "permute",
    "pow",
    "prod",
    "quantile",
    "rand",
    "rand_like",
    "randint",
    "randint_like",
    "randn",
    "randn_like",
    "randperm",
    "reciprocal",
    "relu",
    "remainder",
    "repeat_interleave",
    "reshape",
    "roll",
    "round",
    "rsqrt",
    "save",
    "scatter",
    "scatter_add",
    "searchsorted",
    "select",
    "sigmoid",
    "sign",
    "sin",
    "sinh",
    "softmax",
    "sort",
    "sparse",
    "sparse_coo",
    "sparse_coo_tensor",
    "SparseTensor",
    "split",
    "sqrt",
    "square",
    "squeeze",
    "stack",
    "std",
    "std_mean",
    "strided",
    "sub",
    "sum",
    "take_along_dim",
    "tanh",
    "Tensor",
    "tensor",
    "tensor_split",
    "topk",
    "trace",
    "transpose",
    "tril",
    "triu",
    "trunc",
    "unbind",
    "unique",
    "unsqueeze",
    "var",
    "var_mean",
    "view",
    "vstack",
    "where",
    "zeros",
    "zeros_like",
]
