"""Tensor operations written once for torch and for tensorplay_jax: torch is the oracle.

Each case (``tests/_torch_golden.py``'s ``Case``) is ``fn(m, *tensors)`` with ``m`` the
``torch`` module or ``tensorplay_jax``. ``golden/make_golden.py`` stores torch's answers in
``golden/torch_ops.npz``; ``test_torch_parity.py`` runs the cases here and compares.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tests._torch_golden import Case

_R = np.random.default_rng(20261207)


def _n(*shape: int) -> np.ndarray:
    return _R.standard_normal(shape).astype(np.float32)


def _pos(*shape: int) -> np.ndarray:
    return (np.abs(_R.standard_normal(shape)) + 0.5).astype(np.float32)


def _unit(*shape: int) -> np.ndarray:
    return _R.uniform(-0.9, 0.9, shape).astype(np.float32)


def _distinct(*shape: int) -> np.ndarray:
    """Values without ties (sorting and top-k pick the same indices on any library)."""
    return (_R.permutation(int(np.prod(shape))).reshape(shape) * 0.37 - 3.0).astype(np.float32)


def _ints(high: int, *shape: int) -> np.ndarray:
    return _R.integers(0, high, shape).astype(np.int64)


_SPECIAL = np.array([-2.5, -1.5, -0.5, 0.0, 0.5, 1.5, 2.5, 1.2345, -7.75], np.float32)
_WITH_NAN = np.array([1.0, np.nan, -np.inf, np.inf, -0.0, 3.0], np.float32)


CASES: dict[str, Case] = {
    # elementwise
    "floor": Case(lambda m, x: m.floor(x), (_SPECIAL,)),
    "ceil": Case(lambda m, x: x.ceil(), (_SPECIAL,)),
    "trunc": Case(lambda m, x: m.trunc(x), (_SPECIAL,)),
    "frac": Case(lambda m, x: x.frac(), (_SPECIAL,)),
    "round": Case(lambda m, x: m.round(x), (_SPECIAL,)),
    "round_decimals": Case(lambda m, x: x.round(decimals=2), (_SPECIAL,)),
    "sign": Case(lambda m, x: m.sign(x), (_SPECIAL,)),
    "sign_nan": Case(lambda m, x: x.sign(), (_WITH_NAN,), differentiable=False),
    "reciprocal": Case(lambda m, x: m.reciprocal(x), (_pos(3, 4),)),
    "reciprocal_int": Case(lambda m, x: x.reciprocal(), (np.array([1, 2, 4]),)),
    "rsqrt": Case(lambda m, x: m.rsqrt(x), (_pos(3, 4),)),
    "log1p": Case(lambda m, x: m.log1p(x), (_pos(3, 4),)),
    "expm1": Case(lambda m, x: x.expm1(), (_n(3, 4),)),
    "log2": Case(lambda m, x: m.log2(x), (_pos(5),)),
    "log10": Case(lambda m, x: x.log10(), (_pos(5),)),
    "erf": Case(lambda m, x: m.erf(x), (_n(3, 4),)),
    "sinh_cosh": Case(lambda m, x: m.sinh(x) + x.cosh(), (_n(5),)),
    "asin_acos_atan": Case(lambda m, x: m.asin(x) * x.acos() + m.atan(x), (_unit(6),)),
    "atan2": Case(lambda m, y, x: m.atan2(y, x), (_n(5), _n(5))),
    "fmod": Case(lambda m, x: m.fmod(x, 1.5), (_SPECIAL,)),
    "fmod_tensor": Case(lambda m, x, y: x.fmod(y), (_n(5), _pos(5))),
    "clip": Case(lambda m, x: m.clip(x, -0.5, 0.5), (_n(3, 4),)),
    "lerp": Case(lambda m, a, b: m.lerp(a, b, 0.25), (_n(4), _n(4))),
    "lerp_tensor_weight": Case(lambda m, a, b, w: a.lerp(b, w), (_n(4), _n(4), _unit(4))),
    "isnan_isinf_isfinite": Case(
        lambda m, x: (m.isnan(x), x.isinf(), m.isfinite(x)), (_WITH_NAN,), differentiable=False
    ),
    "nan_to_num": Case(lambda m, x: m.nan_to_num(x, nan=0.5, posinf=9.0), (_WITH_NAN,), False),
    "logical": Case(
        lambda m, a, b: (
            m.logical_and(a, b),
            a.logical_or(b),
            m.logical_xor(a, b),
            a.logical_not(),
        ),
        (np.array([True, True, False, False]), np.array([True, False, True, False])),
    ),
    "maximum_minimum_methods": Case(lambda m, a, b: (a.maximum(b), a.minimum(b)), (_n(5), _n(5))),
    "where_method": Case(lambda m, x, y: x.where(x > 0, y), (_n(6), _n(6))),
    "isclose": Case(
        lambda m, a, b: m.isclose(a, b, rtol=1e-3, atol=0.0),
        (np.array([1.0, 2.0, 3.0], np.float32), np.array([1.0005, 2.1, 3.0], np.float32)),
        differentiable=False,
    ),
    "count_nonzero": Case(
        lambda m, x: (m.count_nonzero(x), x.count_nonzero(dim=1)),
        (np.array([[0.0, 1.0, 2.0], [0.0, 0.0, 3.0]], np.float32),),
        differentiable=False,
    ),
    # scans, sorting, flips
    "cumsum": Case(lambda m, x: m.cumsum(x, dim=1), (_n(3, 4),)),
    "cumsum_int": Case(lambda m, x: x.cumsum(0), (np.array([1, 2, 3], np.int32),)),
    "cumprod": Case(lambda m, x: x.cumprod(dim=0), (_n(4, 3),)),
    "sort": Case(lambda m, x: tuple(m.sort(x, dim=1)), (_distinct(3, 5),)),
    "sort_descending": Case(lambda m, x: tuple(x.sort(0, descending=True)), (_distinct(4, 3),)),
    "sort_stable_ties": Case(
        lambda m, x: tuple(m.sort(x, stable=True)),
        (np.array([2.0, 1.0, 2.0, 0.0, 1.0], np.float32),),
    ),
    "sort_nan": Case(lambda m, x: tuple(x.sort(descending=True)), (_WITH_NAN,), False),
    "argsort": Case(lambda m, x: m.argsort(x, dim=-1), (_distinct(3, 5),)),
    "argsort_descending": Case(lambda m, x: x.argsort(dim=0, descending=True), (_distinct(4, 3),)),
    "topk": Case(lambda m, x: tuple(m.topk(x, 2)), (_distinct(3, 5),)),
    "topk_smallest_dim0": Case(
        lambda m, x: tuple(x.topk(3, dim=0, largest=False)), (_distinct(5, 2),)
    ),
    "flip": Case(lambda m, x: m.flip(x, [0, 2]), (_n(2, 3, 4),)),
    "flip_method": Case(lambda m, x: x.flip(1), (_n(2, 3),)),
    "roll": Case(lambda m, x: m.roll(x, 1, 0), (_n(3, 4),)),
    "roll_flat": Case(lambda m, x: x.roll(-2), (_n(3, 4),)),
    "roll_dims": Case(lambda m, x: m.roll(x, (1, -1), (0, 1)), (_n(3, 4),)),
    # gathers and scatters along a dimension
    "gather": Case(lambda m, x, i: m.gather(x, 1, i), (_n(3, 4), _ints(4, 3, 2))),
    "gather_method_dim0": Case(lambda m, x, i: x.gather(0, i), (_n(3, 4), _ints(3, 2, 4))),
    "index_select": Case(
        lambda m, x, i: m.index_select(x, 1, i), (_n(3, 4), np.array([3, 0, 3], np.int64))
    ),
    "select": Case(lambda m, x: (m.select(x, 1, 2), x.select(0, -1)), (_n(3, 4),)),
    "take_along_dim": Case(
        lambda m, x, i: m.take_along_dim(x, i, dim=1), (_n(3, 4), _ints(4, 3, 2))
    ),
    "masked_select": Case(lambda m, x: m.masked_select(x, x > 0), (_n(3, 4),)),
    "scatter": Case(
        lambda m, x, s: x.scatter(0, m.tensor([[2, 0, 1, 1]]), s),
        (_n(3, 4), _n(1, 4)),
    ),
    "scatter_add": Case(
        lambda m, x, s: m.scatter_add(x, 1, m.tensor([[0, 0, 2], [1, 3, 3]]), s),
        (_n(2, 4), _n(2, 3)),
    ),
    "index_add": Case(
        lambda m, x, s: x.index_add(0, m.tensor([2, 0, 2]), s, alpha=2.0),
        (_n(3, 4), _n(3, 4)),
    ),
    # shapes
    "repeat": Case(lambda m, x: x.repeat(2, 1, 3), (_n(2, 3),)),
    "repeat_interleave": Case(lambda m, x: m.repeat_interleave(x, 2, dim=0), (_n(2, 3),)),
    "repeat_interleave_flat": Case(lambda m, x: x.repeat_interleave(3), (_n(2, 2),)),
    "repeat_interleave_counts": Case(
        lambda m, x: x.repeat_interleave(m.tensor([1, 0, 2]), dim=1), (_n(2, 3),)
    ),
    "expand_as": Case(lambda m, x, y: x.expand_as(y), (_n(3, 1), _n(3, 4))),
    "broadcast_tensors": Case(
        lambda m, x, y: tuple(m.broadcast_tensors(x, y)), (_n(3, 1), _n(1, 4))
    ),
    "meshgrid": Case(lambda m, x, y: tuple(m.meshgrid(x, y, indexing="ij")), (_n(3), _n(2))),
    "meshgrid_xy": Case(lambda m, x, y: tuple(m.meshgrid(x, y, indexing="xy")), (_n(3), _n(2))),
    "vstack_hstack": Case(
        lambda m, x, y: (m.vstack([x, y]), m.hstack([x, y])), (_n(2, 3), _n(2, 3))
    ),
    "tensor_split": Case(lambda m, x: tuple(m.tensor_split(x, 3, dim=1)), (_n(2, 7),)),
    "type_as": Case(
        lambda m, x, y: x.type_as(y), (np.array([1.7, -2.2], np.float32), np.array([1]))
    ),
    # matrices
    "tril_triu": Case(lambda m, x: (m.tril(x), x.triu(1), m.tril(x, -1)), (_n(4, 5),)),
    "diag_vector": Case(lambda m, x: m.diag(x), (_n(3),)),
    "diag_matrix": Case(lambda m, x: (x.diag(), m.diag(x, 1)), (_n(3, 4),)),
    "diagonal": Case(lambda m, x: (m.diagonal(x), x.diagonal(offset=-1)), (_n(3, 4),)),
    "trace": Case(lambda m, x: m.trace(x), (_n(3, 4),)),
    "outer": Case(lambda m, x, y: m.outer(x, y), (_n(3), _n(4))),
    "dot": Case(lambda m, x, y: x.dot(y), (_n(5), _n(5))),
    "cross": Case(lambda m, x, y: m.cross(x, y, dim=1), (_n(4, 3), _n(4, 3))),
    "einsum": Case(lambda m, x, y: m.einsum("bij,bjk->bik", x, y), (_n(2, 3, 4), _n(2, 4, 5))),
    "einsum_list": Case(lambda m, x: m.einsum("ii->i", [x]), (_n(3, 3),)),
    "addmm": Case(
        lambda m, c, a, b: m.addmm(c, a, b, beta=0.5, alpha=2.0), (_n(2, 4), _n(2, 3), _n(3, 4))
    ),
    # factories
    "linspace": Case(lambda m: m.linspace(-1.0, 2.0, steps=7), ()),
    "logspace": Case(lambda m: m.logspace(0.0, 2.0, steps=5), ()),
    "full_like": Case(lambda m, x: m.full_like(x, 2.5), (_n(2, 3),), differentiable=False),
    "as_tensor": Case(lambda m: m.as_tensor([[1.0, 2.0], [3.0, 4.0]]) * 2, ()),
    "new_factories": Case(
        lambda m, x: (
            x.new_zeros(2, 3),
            x.new_ones((2,)),
            x.new_full((2, 2), 7.0),
            x.new_tensor([1.5, 2.5]),
        ),
        (_n(2),),
        differentiable=False,
    ),
    # edges: integers, ties, negative dims and offsets, broadcasting, batches
    "sort_int_ties_descending": Case(
        lambda m, x: tuple(m.sort(x, descending=True, stable=True)),
        (np.array([[3, 1, 3, 2, 1], [0, 0, 5, 5, 1]], np.int64),),
    ),
    "topk_int": Case(lambda m, x: tuple(x.topk(2, dim=0)), (np.array([[4, 1], [9, 7], [2, 8]]),)),
    "argsort_negative_zero": Case(
        lambda m, x: m.argsort(x, stable=True), (np.array([0.0, -0.0, 0.0, -1.0], np.float32),)
    ),
    "cumsum_bool": Case(lambda m, x: m.cumsum(x, 0), (np.array([True, False, True]),)),
    "cumsum_negative_dim": Case(lambda m, x: x.cumsum(-2), (_n(3, 2, 2),)),
    "gather_negative_dim": Case(lambda m, x, i: x.gather(-1, i), (_n(2, 5), _ints(5, 2, 3))),
    "index_select_dim0": Case(
        lambda m, x, i: x.index_select(0, i), (_n(4, 2), np.array([1, 1, 3], np.int64))
    ),
    "take_along_dim_flat": Case(
        lambda m, x, i: m.take_along_dim(x, i), (_n(3, 4), np.array([11, 0, 5], np.int64))
    ),
    "masked_select_broadcast": Case(
        lambda m, x: x.masked_select(m.tensor([[True, False, True, False]])), (_n(3, 4),)
    ),
    "select_negative": Case(lambda m, x: m.select(x, -1, -2), (_n(2, 3, 4),)),
    "diag_negative_offset": Case(lambda m, x: (m.diag(x, -1), x.diag(2)), (_n(3),)),
    "tril_batched": Case(lambda m, x: (x.tril(), m.triu(x, -1)), (_n(2, 3, 3),)),
    "trace_int": Case(lambda m, x: m.trace(x), (np.arange(9).reshape(3, 3),)),
    "cross_default_dim": Case(lambda m, x, y: m.linalg.cross(x, y), (_n(2, 3), _n(2, 3))),
    "einsum_outer": Case(lambda m, x, y: m.einsum("i,j->ij", x, y), (_n(3), _n(2))),
    "roll_negative_dim": Case(lambda m, x: m.roll(x, shifts=2, dims=-1), (_n(2, 5),)),
    "flip_negative": Case(lambda m, x: x.flip(-1), (_n(2, 3),)),
    "repeat_interleave_negative_dim": Case(
        lambda m, x: x.repeat_interleave(2, dim=-1), (_n(2, 2),)
    ),
    "repeat_more_dims": Case(lambda m, x: x.repeat(2, 2), (_n(3),)),
    "round_negative_decimals": Case(
        lambda m, x: m.round(x, decimals=-1),
        (np.array([14.0, 15.0, 25.0, -35.0, 123.4], np.float32),),
    ),
    "where_method_scalar": Case(lambda m, x: x.where(x > 0, 0.0), (_n(5),)),
    "new_factories_int": Case(
        lambda m, x: (x.new_zeros(2), x.new_full((2,), 3), x.new_tensor([1, 2])),
        (np.array([1, 2], np.int32),),
    ),
    "full_like_int": Case(lambda m, x: m.full_like(x, 7), (np.array([1, 2], np.int32),)),
    "linspace_int_ends": Case(lambda m: m.linspace(0, 10, 6), ()),
    "tensor_split_indices": Case(lambda m, x: tuple(x.tensor_split([1, 4], dim=0)), (_n(6, 2),)),
    "hstack_1d": Case(lambda m, x, y: m.hstack([x, y]), (_n(2), _n(3))),
    "vstack_1d": Case(lambda m, x, y: m.vstack([x, y]), (_n(3), _n(3))),
    "scatter_value": Case(lambda m, x: m.scatter(x, 1, m.tensor([[0], [2]]), 5.0), (_n(2, 3),)),
    "count_nonzero_dims": Case(
        lambda m, x: m.count_nonzero(x, dim=(0, 1)),
        (np.array([[[0, 1], [2, 0]], [[0, 0], [3, 4]]], np.float32),),
        differentiable=False,
    ),
    # the operations that were there before the table: edges torch decides
    "abs_sqrt_at_zero": Case(
        lambda m, x: (x.abs(), (x * x + 1).sqrt()), (np.array([0.0, -2.0, 3.0], np.float32),)
    ),
    "relu_at_zero": Case(lambda m, x: m.relu(x), (np.array([-1.0, 0.0, 2.0], np.float32),)),
    "clamp_at_bounds": Case(
        lambda m, x: x.clamp(-1.0, 1.0), (np.array([-2.0, -1.0, 0.0, 1.0, 2.0], np.float32),)
    ),
    "maximum_ties": Case(
        lambda m, a, b: m.maximum(a, b),
        (np.array([1.0, 2.0, 3.0], np.float32), np.array([1.0, 5.0, 3.0], np.float32)),
    ),
    "max_all_ties": Case(lambda m, x: x.max(), (np.array([3.0, 1.0, 3.0], np.float32),)),
    "amax_ties": Case(
        lambda m, x: m.amax(x, dim=1), (np.array([[3.0, 1.0, 3.0], [0.0, 2.0, 2.0]], np.float32),)
    ),
    "max_dim_ties": Case(
        lambda m, x: tuple(x.max(dim=1)),
        (np.array([[3.0, 1.0, 3.0], [0.0, 2.0, 2.0]], np.float32),),
    ),
    "min_dim_keepdim": Case(lambda m, x: tuple(m.min(x, dim=0, keepdim=True)), (_distinct(3, 2),)),
    "argmax_ties": Case(lambda m, x: x.argmax(dim=1), (np.array([[1.0, 4.0, 4.0]], np.float32),)),
    "prod_with_zero": Case(
        lambda m, x: (x.prod(), x.prod(dim=1)),
        (np.array([[2.0, 0.0, 3.0], [1.0, 4.0, 0.5]], np.float32),),
    ),
    "var_std": Case(
        lambda m, x: (x.var(), x.std(dim=0), m.var(x, dim=1, unbiased=False)), (_n(3, 4),)
    ),
    "mean_sum_dims": Case(
        lambda m, x: (x.mean(dim=(0, 2)), m.sum(x, dim=-1, keepdim=True)), (_n(2, 3, 4),)
    ),
    "logsumexp_neg_inf": Case(
        lambda m, x: m.logsumexp(x, dim=0),
        (np.array([[-np.inf, 1.0], [-np.inf, 2.0]], np.float32),),
        differentiable=False,
    ),
    "softmax_log_softmax": Case(
        lambda m, x: (x.softmax(dim=0), m.log_softmax(x, dim=-1)), (_n(3, 4),)
    ),
    "pow_edges": Case(
        lambda m, x: (x**2, x**0.5, m.pow(x, 3)), (np.array([0.0, 1.0, 4.0], np.float32),)
    ),
    "div_int": Case(
        lambda m, a, b: (a / b, a // b, a % b), (np.array([7, -7, 9]), np.array([2, 2, -4]))
    ),
    "remainder_float": Case(lambda m, a: (a % 1.5, m.remainder(a, -1.5)), (_SPECIAL,)),
    "matmul_broadcast": Case(lambda m, a, b: a @ b, (_n(2, 3, 4), _n(4, 5))),
    "matmul_vector": Case(lambda m, a, b: (a @ b, b @ a.T), (_n(3, 4), _n(4))),
    "where_grads": Case(lambda m, c, a, b: m.where(c > 0, a, b), (_n(5), _n(5), _n(5))),
    "masked_fill": Case(lambda m, x: x.masked_fill(x > 0, 2.0), (_n(3, 4),)),
    "addcmul_addcdiv": Case(
        lambda m, a, b, c: (a.addcmul(b, c, value=0.5), a.addcdiv(b, c, value=2.0)),
        (_n(4), _n(4), _pos(4)),
    ),
    "scatter_add_repeats": Case(
        lambda m, x, s: x.scatter_add(0, m.tensor([1, 1, 0, 1]), s), (_n(3), _n(4))
    ),
    "cat_stack": Case(
        lambda m, a, b: (m.cat([a, b], dim=1), m.stack([a, b], dim=-1)), (_n(2, 3), _n(2, 3))
    ),
    "split_chunk_unbind": Case(
        lambda m, x: (*x.split([1, 3], dim=1), *m.chunk(x, 3, dim=0), *x.unbind(1)), (_n(3, 4),)
    ),
    "narrow_permute_transpose": Case(
        lambda m, x: (x.narrow(2, 1, 2), x.permute(2, 0, 1), m.transpose(x, 0, 2)), (_n(2, 3, 4),)
    ),
    "expand_squeeze_unsqueeze_flatten": Case(
        lambda m, x: (x.expand(2, 3, 4), x.squeeze(0), x.unsqueeze(-1), m.flatten(x, 1)),
        (_n(1, 3, 4),),
    ),
    "indexing_basic": Case(
        lambda m, x: (x[1], x[:, -1], x[::2, 1:3], x[None, ..., 0]), (_n(3, 4),)
    ),
    "indexing_advanced": Case(
        lambda m, x: (x[m.tensor([2, 0, 2])], x[m.tensor([0, 1]), m.tensor([3, 3])], x[x > 0]),
        (_n(3, 4),),
    ),
    "norm": Case(lambda m, x: (x.norm(), m.linalg.vector_norm(x, ord=1, dim=1)), (_n(3, 4),)),
    "norm_at_zero": Case(lambda m, x: x.norm(), (np.zeros(3, np.float32),)),
    "std_one_element": Case(lambda m, x: x.std(), (np.array([2.0], np.float32),), False),
    "sigmoid_tanh_exp_log": Case(
        lambda m, x: (x.sigmoid(), m.tanh(x), x.exp(), (x * x + 0.1).log()), (_n(5),)
    ),
    "arange_eye_full": Case(
        lambda m: (m.arange(5), m.arange(0, 1, 0.25), m.eye(2, 3), m.full((2,), 1.5)), ()
    ),
    "var_std_positional_forms": Case(
        lambda m, x: (x.var(1, False), x.std(False), x.var(0, True, True), x.std(correction=0)),
        (_n(3, 4),),
    ),
    "clamp_tensor_bounds": Case(
        lambda m, x, lo, hi: m.clamp(x, lo, hi), (_n(6), _n(6) - 1.0, _n(6) + 1.0)
    ),
    "clamp_min_above_max": Case(lambda m, x: x.clamp(1.0, -1.0), (_n(4),)),
    "clamp_int_float_bound": Case(
        lambda m, x: x.clamp(min=1.5), (np.array([1, 2, 3]),), differentiable=False
    ),
    "abs_int_and_negative_zero": Case(
        lambda m, x, y: (x.abs(), m.abs(y)),
        (np.array([-3, 0, 2]), np.array([-0.0, -1.5], np.float32)),
    ),
    # order statistics, differences, counts
    "median_all_and_dim": Case(
        lambda m, x: (x.median(), *m.median(x, dim=1), *x.median(0, keepdim=True)),
        (_distinct(3, 4),),
    ),
    "kthvalue": Case(lambda m, x: tuple(m.kthvalue(x, 2, dim=0)), (_distinct(4, 3),)),
    "quantile": Case(
        lambda m, x: (
            m.quantile(x, 0.3),
            x.quantile(m.tensor([0.25, 0.5, 0.9]), dim=1, keepdim=True),
            m.quantile(x, 0.4, dim=0, interpolation="nearest"),
            m.quantile(x, 0.4, dim=0, interpolation="midpoint"),
        ),
        (_distinct(3, 5),),
    ),
    "diff": Case(
        lambda m, x, p: (m.diff(x), x.diff(n=2, dim=0), m.diff(x, dim=1, prepend=p)),
        (_n(4, 3), _n(4, 1)),
    ),
    "logcumsumexp": Case(lambda m, x: m.logcumsumexp(x, 1), (_n(3, 4),)),
    "nansum_nanmean": Case(
        lambda m, x: (m.nansum(x), x.nanmean(dim=0)),
        (np.array([[1.0, np.nan, 2.0], [np.nan, 4.0, -1.0]], np.float32),),
    ),
    "var_mean_std_mean": Case(
        lambda m, x: (*m.var_mean(x, dim=1), *m.std_mean(x, unbiased=False)), (_n(3, 4),)
    ),
    "unique": Case(
        lambda m, x: m.unique(x, return_inverse=True, return_counts=True),
        (np.array([3, 1, 2, 3, 1, 7]),),
    ),
    "unique_dim": Case(
        lambda m, x: m.unique(x, dim=0, return_counts=True),
        (np.array([[1, 2], [0, 5], [1, 2]]),),
    ),
    "bincount": Case(
        lambda m, x, w: (m.bincount(x), x.bincount(minlength=8), m.bincount(x, weights=w)),
        (np.array([0, 2, 2, 5]), np.array([0.5, 1.0, 2.0, 0.25], np.float32)),
        differentiable=False,
    ),
    "searchsorted_bucketize": Case(
        lambda m, s, v: (
            m.searchsorted(s, v),
            m.searchsorted(s, v, right=True),
            m.bucketize(v, s),
            m.searchsorted(m.tensor([[1.0, 3.0], [0.0, 9.0]]), m.tensor([[2.0], [9.0]])),
        ),
        (np.array([1.0, 3.0, 5.0], np.float32), np.array([0.0, 3.0, 4.0, 6.0], np.float32)),
        differentiable=False,
    ),
    # writes: in place, through views and indexing
    "setitem_then_grad": Case(lambda m, x, v: _written(x, v), (_n(3, 4), _n(4))),
    "inplace_chain": Case(lambda m, x: _inplace_chain(x), (_n(5),)),
    "view_write_reaches_base": Case(lambda m, x, v: _view_write(x, v), (_n(2, 3), _n(3))),
    "masked_fill_inplace_nonleaf": Case(
        lambda m, x: (x * 1).masked_fill_(x < 0, 0.0) * x, (_n(6),)
    ),
    "index_add_inplace": Case(
        lambda m, x, s: (x * 1).index_add_(0, m.tensor([0, 0]), s), (_n(2, 3), _n(2, 3))
    ),
    "augmented_assignment": Case(lambda m, x, v: _augmented(x, v), (_n(2, 3), _pos(2, 3))),
    "augmented_assignment_reaches_the_model": Case(lambda m, x: _sgd_step(m, x), (_n(4, 2),)),
}


def _augmented(x: Any, v: Any) -> Any:
    y = x * 1.0
    alias = y
    y += v
    y *= x
    y -= 0.5
    y /= v
    y **= 2
    return y, alias  # the alias sees every write: the same Tensor


def _sgd_step(m: Any, x: Any) -> Any:
    lin = m.nn.Linear(2, 1, bias=False)
    with m.no_grad():
        lin.weight.copy_(m.tensor([[0.5, -0.25]]))
    (lin(x) ** 2).sum().backward()
    for p in lin.parameters():
        with m.no_grad():
            p -= 0.1 * p.grad  # the model's own parameter moves
    return lin(x)


def _written(x: Any, v: Any) -> Any:
    y = x * 2
    y[1] = v  # a row replaced: no gradient reaches x's row 1 through y
    y[:, 0] += 1.0
    return y * x


def _inplace_chain(x: Any) -> Any:
    y = x * 2.0  # (torch refuses in-place writes to a saved output, as exp's)
    y.add_(1.0).mul_(2.0)
    y.clamp_(max=3.0)
    return y


def _view_write(x: Any, v: Any) -> Any:
    y = x.clone()
    row = y[0]  # a view of y
    row.mul_(v)  # the write reaches y
    return y.sum(dim=0), row
