"""Sparse COO tensors: values, layout (what stays sparse) and gradients, against torch's.

Expected numbers are torch 2.13's for the same calls, written out, or ``jax.grad`` of the
dense equivalent restricted to the stored pattern.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tensorplay_jax as tp
from tests._procs import REPO_ROOT, reported

I = [[0, 1, 1], [2, 0, 2]]  # noqa: E741  (torch's tests' name)
V = [3.2, 4.1, 5.3]
DENSE = np.array([[0, 0, 3.2], [4.1, 0, 5.3], [0, 0, 0]], np.float32)


def build(requires_grad: bool = False) -> tp.SparseTensor:
    return tp.sparse_coo_tensor(I, V, (3, 3), requires_grad=requires_grad)


def _idx(t: tp.Tensor) -> list[list[int]]:
    return np.asarray(t._indices().value).tolist()


def _vals(t: tp.Tensor) -> np.ndarray:
    return np.asarray(t._values().value)


# ------------------------------------------------------------------ the tensor
def test_construction_gives_shape_dtype_and_parts() -> None:
    x = build()
    assert (x.is_sparse, x.shape, x.size(), x.size(0), x.dtype, x._nnz()) == (
        True,
        (3, 3),
        (3, 3),
        3,
        np.dtype("float32"),
        3,
    )
    assert isinstance(x, tp.Tensor) and not tp.ones(2).is_sparse
    assert _idx(x) == I
    np.testing.assert_allclose(_vals(x), V)
    assert (x.sparse_dim(), x.dense_dim(), x.dim(), x.numel()) == (2, 0, 2, 9)


def test_size_defaults_to_the_smallest_holding_every_index() -> None:
    assert tp.sparse_coo_tensor(I, V).shape == (2, 3)


def test_fresh_tensor_is_uncoalesced_and_indices_need_coalesce() -> None:
    x = build()
    assert not x.is_coalesced()
    with pytest.raises(RuntimeError, match="Cannot get indices on an uncoalesced tensor"):
        x.indices()
    assert x.coalesce().indices().tolist() == I


def test_coalesce_sorts_and_sums_repeats() -> None:
    x = tp.sparse_coo_tensor([[1, 0, 1], [0, 2, 0]], [1.0, 2.0, 3.0], (2, 3))
    c = x.coalesce()
    assert c.is_coalesced() and _idx(c) == [[0, 1], [2, 0]]
    np.testing.assert_allclose(_vals(c), [2.0, 4.0])


def test_coalesce_of_hybrid_tensor_sums_value_rows() -> None:
    x = tp.sparse_coo_tensor([[1, 0, 1]], np.ones((3, 2), np.float32), (4, 2))
    c = x.coalesce()
    assert (c.sparse_dim(), c.dense_dim(), _idx(c)) == (1, 1, [[0, 1]])
    np.testing.assert_allclose(_vals(c), [[1, 1], [2, 2]])


def test_to_dense_places_values_and_sums_repeats() -> None:
    np.testing.assert_allclose(build().to_dense().numpy(), DENSE)
    x = tp.sparse_coo_tensor([[1, 1], [0, 0]], [1.0, 2.0], (2, 2))
    assert x.to_dense().tolist() == [[0.0, 0.0], [3.0, 0.0]]


def test_integer_values_keep_their_dtype() -> None:
    x = tp.sparse_coo_tensor(I, [3, 4, 5], (2, 3))
    assert x.dtype == np.dtype("int32")
    assert x.to_dense().tolist() == [[0, 0, 3], [4, 0, 5]]


def test_repr_shows_indices_values_size_and_nnz() -> None:
    text = repr(build(requires_grad=True))
    for part in ("indices=tensor([[0, 1, 1],", "values=tensor([3.2, 4.1, 5.3])"):
        assert part in text
    assert "size=(3, 3), nnz=3, layout=sparse_coo, requires_grad=True" in text


def test_pickle_keeps_indices_values_and_coalesced_flag() -> None:
    c = pickle.loads(pickle.dumps(build().coalesce()))
    assert c.is_sparse and c.is_coalesced() and _idx(c) == I
    np.testing.assert_allclose(c.to_dense().numpy(), DENSE)


def test_index_outside_size_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"index 3 in dimension 1 .* is outside size"):
        tp.sparse_coo_tensor([[0], [3]], [1.0], (2, 3))


def test_dense_only_operation_says_to_densify() -> None:
    with pytest.raises(TypeError, match=r"call \.to_dense\(\) first"):
        tp.exp(build())
    with pytest.raises(TypeError, match=r"to_dense"):
        build().numpy()


# ------------------------------------------------------------------ what stays sparse
def test_sparse_plus_sparse_is_sparse_with_torch_values() -> None:
    z = build() + build()
    assert z.is_sparse and not z.is_coalesced() and _idx(z) == I
    np.testing.assert_allclose(_vals(z), [6.4, 8.2, 10.6], rtol=1e-6)


def test_sparse_plus_sparse_of_other_pattern_concatenates() -> None:
    other = tp.sparse_coo_tensor([[2, 1], [2, 0]], [1.0, 1.0], (3, 3))
    z = build() + other
    assert _idx(z) == [[0, 1, 1, 2, 1], [2, 0, 2, 2, 0]] and not z.is_coalesced()
    c = build().coalesce() + other.coalesce()
    assert c.is_coalesced() and _idx(c) == [[0, 1, 1, 2], [2, 0, 2, 2]]


def test_dense_plus_sparse_is_dense() -> None:
    d = tp.ones(3, 3) + build()
    assert not d.is_sparse
    np.testing.assert_allclose(d.numpy(), DENSE + 1)


def test_scalar_products_stay_sparse() -> None:
    x = build()
    for y, factor in ((x * 2, 2.0), (2 * x, 2.0), (x / 2, 0.5), (-x, -1.0)):
        assert y.is_sparse
        np.testing.assert_allclose(y.to_dense().numpy(), DENSE * factor, rtol=1e-6)


def test_sparse_times_sparse_is_the_elementwise_product() -> None:
    other = tp.sparse_coo_tensor([[2, 1], [2, 0]], [1.0, 2.0], (3, 3))
    y = build() * other
    assert y.is_sparse
    np.testing.assert_allclose(y.to_dense().numpy(), DENSE * other.to_dense().numpy())


def test_stack_of_sparse_adds_a_leading_sparse_dimension() -> None:
    s = tp.stack([build(), build()])
    assert s.is_sparse and s.shape == (2, 3, 3)
    assert _idx(s) == [[0, 0, 0, 1, 1, 1], [0, 1, 1, 0, 1, 1], [2, 0, 2, 2, 0, 2]]


def test_mm_with_dense_is_dense_with_torch_values() -> None:
    m = tp.mm(build(), tp.ones(3, 2))
    assert not m.is_sparse
    np.testing.assert_allclose(m.numpy(), [[3.2, 3.2], [9.4, 9.4], [0, 0]], rtol=1e-6)
    assert not tp.matmul(build(), tp.ones(3, 2)).is_sparse
    np.testing.assert_allclose((build() @ tp.ones(3)).numpy(), [3.2, 9.4, 0.0], rtol=1e-6)


def test_sparse_sum_over_everything_and_over_a_dimension() -> None:
    assert float(tp.sparse.sum(build())) == pytest.approx(12.6)
    assert float(build().sum()) == pytest.approx(12.6)
    r0, r1 = tp.sparse.sum(build(), dim=0), tp.sparse.sum(build(), dim=1)
    assert r0.is_sparse and _idx(r0) == [[0, 2]] and _idx(r1) == [[0, 1]]
    np.testing.assert_allclose(_vals(r0), [4.1, 8.5], rtol=1e-6)
    np.testing.assert_allclose(_vals(r1), [3.2, 9.4], rtol=1e-6)
    assert not tp.sparse.sum(build(), dim=(0, 1)).is_sparse


# ------------------------------------------------------------------ gradients
def test_sparse_sum_backward_gives_a_coalesced_sparse_gradient() -> None:
    x = build(requires_grad=True)
    tp.sparse.sum(x).backward()
    assert x.grad.is_sparse and x.grad.is_coalesced() and _idx(x.grad) == I
    np.testing.assert_allclose(_vals(x.grad), [1.0, 1.0, 1.0])


def test_to_dense_backward_is_sparse_on_the_pattern() -> None:
    x = build(requires_grad=True)
    w = jnp.arange(9.0).reshape(3, 3)
    (x.to_dense() * tp.Tensor(w)).sum().backward()
    assert x.grad.is_sparse
    expected = jax.grad(lambda d: jnp.sum(d * w))(jnp.asarray(DENSE)) * (DENSE != 0)
    np.testing.assert_allclose(x.grad.to_dense().numpy(), expected)


def test_mm_backward_matches_jax_grad_of_the_dense_product() -> None:
    x, w = build(requires_grad=True), tp.randn(3, 2, requires_grad=True)
    tp.mm(x, w).square().sum().backward()

    def loss(d: jax.Array, wv: jax.Array) -> jax.Array:
        return jnp.sum(jnp.square(d @ wv))

    gd, gw = jax.grad(loss, argnums=(0, 1))(jnp.asarray(DENSE), w.value)
    assert x.grad.is_sparse and not w.grad.is_sparse
    np.testing.assert_allclose(x.grad.to_dense().numpy(), gd * (DENSE != 0), rtol=1e-5)
    np.testing.assert_allclose(w.grad.numpy(), gw, rtol=1e-5)


def test_gradient_through_sparse_product_and_stack() -> None:
    x = build(requires_grad=True)
    tp.sparse.sum(tp.stack([x * x, x]) * 3).backward()
    expected = jax.grad(lambda d: 3 * jnp.sum(d * d + d))(jnp.asarray(DENSE)) * (DENSE != 0)
    np.testing.assert_allclose(x.grad.to_dense().numpy(), expected, rtol=1e-5)


def test_sparse_plus_sparse_gradient_accumulation_stays_sparse() -> None:
    x = build(requires_grad=True)
    (tp.sparse.sum(x) + tp.sparse.sum(x)).backward()
    g = x.grad
    assert g.is_sparse and not g.is_coalesced() and g._nnz() == 6  # torch: concatenated
    np.testing.assert_allclose(g.to_dense().numpy(), 2.0 * (DENSE != 0))


def test_sparse_then_dense_gradient_accumulation_becomes_dense() -> None:
    x = build(requires_grad=True)
    tp.sparse.sum(x).backward()
    (tp.ones(3, 3) + x).sum().backward()  # torch gives the sparse input the dense gradient
    assert not x.grad.is_sparse
    np.testing.assert_allclose(x.grad.numpy(), 1.0 + (DENSE != 0))


def test_dense_leaf_with_sparse_gradient_accumulates_a_dense_one() -> None:
    w = tp.zeros(3, 3, requires_grad=True)
    (w + build()).sum().backward()
    assert not w.grad.is_sparse
    tp.sparse.sum(x := build(requires_grad=True)).backward()
    assert x.grad.is_sparse


def test_values_backward_is_sparse_on_the_indices() -> None:
    x = build(requires_grad=True)
    c = x.coalesce()
    (c.values() * tp.tensor([1.0, 2.0, 3.0])).sum().backward()
    assert x.grad.is_sparse
    np.testing.assert_allclose(x.grad.to_dense().numpy(), [[0, 0, 1], [2, 0, 3], [0, 0, 0]])


def test_in_place_product_of_a_leaf_that_requires_grad_is_refused() -> None:
    x = build(requires_grad=True)
    with pytest.raises(RuntimeError, match="in-place operation"):
        x *= 2
    y = build()
    y *= 2
    np.testing.assert_allclose(y.to_dense().numpy(), DENSE * 2)


def test_import_loads_no_jax_sparse_until_a_sparse_tensor_is_made() -> None:
    code = (
        "import sys, tensorplay_jax as tp; from tests._worker import report; "
        "a = 'jax.experimental.sparse' in sys.modules; tp.sparse_coo_tensor([[0]], [1.0]); "
        "report(after_import=a, after_first=('jax.experimental.sparse' in sys.modules))"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    assert reported(out) == {"after_import": False, "after_first": True}, out.stderr


def test_data_ptr_is_the_values_buffer_and_refused_on_the_sparse_tensor() -> None:
    x = build()
    assert x._values().data_ptr() == x._values().data_ptr() != 0
    with pytest.raises(RuntimeError, match="doesn't have storage"):
        x.data_ptr()


# ------------------------------------------------------------------ dense to sparse
def test_to_sparse_stores_the_nonzero_entries_coalesced() -> None:
    s = tp.tensor(DENSE).to_sparse()
    assert (s.is_sparse, s.layout, s.is_coalesced(), s.shape) == (True, tp.sparse_coo, True, (3, 3))
    assert np.asarray(s.indices().value).tolist() == I  # torch's row-major order
    np.testing.assert_allclose(s.values().numpy(), V)
    assert tp.ones(2).layout == tp.strided


def test_to_sparse_with_dense_dimensions_keeps_slices_with_any_nonzero() -> None:
    y = tp.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0]])
    for s in (y.to_sparse(1), y.to_sparse(dense_dim=1)):
        assert (s.sparse_dim(), s.dense_dim(), _idx(s)) == (1, 1, [[1]])
        assert _vals(s).tolist() == [[1.0, 0.0]]


def test_to_sparse_counts_nan_and_not_negative_zero_and_keeps_the_dtype() -> None:
    s = tp.tensor([float("nan"), -0.0, 1.0]).to_sparse()
    assert _idx(s) == [[0, 2]] and np.isnan(_vals(s)[0]) and _vals(s)[1] == 1.0
    ints = tp.tensor([1, 0, 2]).to_sparse()
    assert (_idx(ints), _vals(ints).tolist(), ints.dtype) == ([[0, 2]], [1, 2], tp.tensor(1).dtype)
    flags = tp.tensor([True, False]).to_sparse()
    assert (_idx(flags), _vals(flags).tolist()) == ([[0]], [True])


def test_to_sparse_of_zeros_and_of_a_scalar_matches_torch() -> None:
    empty = tp.zeros(2, 2).to_sparse()
    assert (empty._nnz(), np.asarray(empty._indices().value).shape) == (0, (2, 0))
    three, zero = tp.tensor(3.0).to_sparse(), tp.tensor(0.0).to_sparse()
    assert (three._nnz(), _vals(three).tolist(), three.shape) == (1, [3.0], ())
    assert zero._nnz() == 0


def test_to_sparse_backward_gives_the_dense_input_a_dense_gradient() -> None:
    w = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]], np.float32)
    x = tp.tensor(DENSE, requires_grad=True)
    (x.to_sparse().to_dense() * tp.tensor(w)).sum().backward()
    assert not x.grad.is_sparse  # torch: w where x is nonzero, 0 elsewhere
    np.testing.assert_allclose(x.grad.numpy(), np.where(DENSE != 0, w, 0.0))
    x.grad = None
    tp.sparse.sum(x.to_sparse() * 2).backward()
    np.testing.assert_allclose(x.grad.numpy(), np.where(DENSE != 0, 2.0, 0.0))


def test_to_sparse_of_a_sparse_tensor_is_itself_and_dense_to_dense_too() -> None:
    s, d = build(), tp.ones(2)
    assert s.to_sparse() is s and s.to_sparse(2) is s and s.to_sparse_coo() is s
    assert d.to_dense() is d
    with pytest.raises(RuntimeError, match="Sparse to Sparse with sparse_dim"):
        s.to_sparse(1)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda t: t.to_sparse(3), RuntimeError, r"must be in \[0,2\] range, but 3"),
        (lambda t: t.to_sparse(-1), RuntimeError, r"must be in \[0,2\] range, but -1"),
        (lambda t: t.to_sparse(0), RuntimeError, "must be in >0 when self.dim"),
        (lambda t: t.to_sparse(dense_dim=2), RuntimeError, "dense_dim argument must be !="),
        (lambda t: t.to_sparse(layout="sparse_csr"), NotImplementedError, "sparse_csr"),
        (lambda t: t.to_sparse(blocksize=(1, 1)), NotImplementedError, "blocksize"),
        (lambda t: t.to_sparse(1.5), TypeError, "float"),
    ],
)
def test_to_sparse_refuses_what_torch_refuses(call, error, match) -> None:
    with pytest.raises(error, match=match):
        call(tp.ones(2, 2))


def test_to_sparse_inside_a_jax_trace_says_it_needs_values() -> None:
    with pytest.raises(TypeError, match="holds a JAX tracer"):
        jax.jit(lambda v: tp.Tensor(v).to_sparse().to_dense().value)(jnp.ones(2))
