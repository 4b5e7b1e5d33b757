"""The tensor operations whose values ``test_torch_parity`` checks against torch: their
errors (torch's types, naming what is wrong), views, ``retain_grad``, the ``new_*``
factories and their behaviour inside JAX transformations."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tensorplay_jax as tp


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda x: x.gather(1, tp.tensor([[0, 4]])), RuntimeError, "index 4 is out of bounds"),
        (lambda x: x.gather(2, tp.tensor([[0]])), IndexError, "Dimension out of range"),
        (lambda x: x.gather(0, tp.tensor([0])), RuntimeError, "same number of dimensions"),
        (lambda x: x.gather(0, tp.tensor([[0.0]])), RuntimeError, "Expected dtype int64"),
        (lambda x: x.index_select(0, tp.tensor([[0]])), IndexError, "supposed to be a vector"),
        (lambda x: x.index_select(1, tp.tensor([-5])), RuntimeError, "index -5 is out of bounds"),
        (lambda x: x.select(1, 4), IndexError, "index 4 out of range"),
        (lambda x: x.topk(5), RuntimeError, "k out of range"),
        (lambda x: x.masked_select(tp.tensor([1, 0, 1, 0])), RuntimeError, "BoolTensor"),
        (lambda x: x.flip([0, -2]), RuntimeError, "dims has duplicates"),
        (lambda x: x.roll((1, 2), 0), RuntimeError, "shifts and dimensions must align"),
        (lambda x: x.repeat(2), RuntimeError, "can not be smaller"),
        (lambda x: x.repeat_interleave(tp.tensor([1, -1, 1, 1]), 1), RuntimeError, "negative"),
        (lambda x: x.repeat_interleave(tp.tensor([1, 2]), 1), RuntimeError, "same size"),
        (lambda x: tp.tril(x[0]), RuntimeError, "at least 2 dimensions"),
        (lambda x: tp.dot(x, x), RuntimeError, "1D tensors expected"),
        (lambda x: tp.cross(x, x, dim=1), RuntimeError, "must have length 3"),
        (lambda x: tp.diag(x[None]), RuntimeError, "Supports 1D or 2D"),
        (lambda x: tp.linspace(0, 1, -1), RuntimeError, "non-negative"),
        (lambda x: tp.meshgrid(x, x), RuntimeError, "0D or 1D"),
        (lambda x: x.kthvalue(5, dim=1), RuntimeError, "k out of range"),
        (lambda x: x.quantile(0.5, interpolation="cubic"), RuntimeError, "interpolation"),
        (lambda x: tp.bincount(x.int()), RuntimeError, "1-d non-negative"),
        (lambda x: tp.searchsorted(x[0], x[0], side="up"), RuntimeError, "'left' or 'right'"),
    ],
)
def test_bad_arguments_raise_torchs_error_type_naming_the_problem(call, error, match):
    with pytest.raises(error, match=match):
        call(tp.ones(3, 4))


def test_select_is_a_view_its_writes_reach_the_base():
    x = tp.zeros(2, 3)
    x.select(1, -1).fill_(5.0)  # x[:, -1] = 5, as torch's view
    np.testing.assert_array_equal(x.numpy(), [[0.0, 0.0, 5.0], [0.0, 0.0, 5.0]])


def test_retain_grad_keeps_a_non_leaf_gradient_and_accumulates_it():
    x = tp.tensor([1.0, 2.0], requires_grad=True)
    y = x * 3
    y.retain_grad()
    y.retain_grad()  # once is enough: the gradient is kept once per backward
    assert y.retains_grad and not x.retains_grad
    (y * y).sum().backward(retain_graph=True)
    np.testing.assert_allclose(y.grad.numpy(), [6.0, 12.0])  # d(y^2)/dy = 2y
    (y * 2).sum().backward()
    np.testing.assert_allclose(y.grad.numpy(), [8.0, 14.0])
    np.testing.assert_allclose(x.grad.numpy(), [18.0 + 6.0, 36.0 + 6.0])
    z = x * 2
    assert z.grad is None  # without retain_grad nothing is kept
    x.retain_grad()  # a leaf keeps its gradient anyway: nothing changes
    with pytest.raises(RuntimeError, match="requires_grad=False"):
        tp.ones(2).retain_grad()


def test_new_factories_take_the_tensors_dtype_and_device_unless_given():
    device = jax.devices()[1]
    x = tp.ones(2, dtype=tp.int32, device=device)
    for t in (x.new_zeros(3), x.new_ones((2, 2)), x.new_full((2,), 4), x.new_empty(1)):
        assert (t.dtype, t.device, t.requires_grad) == (np.dtype("int32"), device, False)
    assert x.new_tensor([1.5]).dtype == np.dtype("int32")
    assert x.new_zeros(2, dtype=tp.float32).dtype == np.dtype("float32")
    w = tp.ones(2).new_tensor([1.0, 2.0], requires_grad=True)
    assert w.requires_grad and w.is_leaf


def test_dtype_and_size_queries():
    x = tp.ones(3, 2)
    assert (x.is_floating_point(), x.is_complex(), x.element_size(), x.nbytes) == (
        True,
        False,
        4,
        24,
    )
    assert not tp.tensor([1]).is_floating_point() and x.half().dtype == np.dtype("float16")
    assert x.bfloat16().dtype == jnp.bfloat16 and x.is_cuda is False


def test_orderings_and_gathers_run_inside_jax_jit_and_grad():
    v = jnp.array([[3.0, -1.0, 2.0], [0.5, 4.0, -2.0]])

    @jax.jit
    def f(a):
        t = tp.Tensor(a)
        top = t.topk(2).values.sum()
        ordered = t.sort(dim=1, descending=True).values[:, 0].sum()
        picked = t.gather(1, tp.tensor([[2], [0]])).sum()
        return (top + ordered + picked + t.cumsum(1).flip(0)[0, -1]).value

    want = (3 + 2 + 4 + 0.5) + (3 + 4) + (2 + 0.5) + (0.5 + 4 - 2)
    assert float(f(v)) == pytest.approx(want)
    g = jax.grad(lambda a: f(a))(v)
    np.testing.assert_allclose(  # by hand: each term's selected positions
        np.asarray(g), [[2.0, 0.0, 2.0], [3.0, 3.0, 1.0]]
    )


@pytest.mark.parametrize(
    "op",
    [
        lambda t: t.masked_select(t > 0),
        lambda t: t.nonzero(),
        lambda t: t.to_sparse().values(),
        lambda t: t.unique(),
        lambda t: t.int().bincount(),
    ],
)
def test_value_sized_results_inside_jit_say_what_to_use_there(op):
    with pytest.raises(TypeError, match=r"jax\.jit"):
        jax.jit(lambda a: op(tp.Tensor(a)).value)(jnp.ones(3))
