"""torch's ``autograd.Function`` on the local tape: apply, ctx, several outputs, errors.

Expected gradients are written out (closed forms in NumPy) or taken from ``jax.grad``;
the messages are torch's. Each graph runs with deferred recording on and off, and the
recurring-step tests run enough steps for the fused and known compiled backward
passes (``_fused``/``_known``) to be tried: a Function node must still run each time.
"""

from __future__ import annotations

from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tensorplay_jax as tp
from tensorplay_jax.autograd import AccumulateGrad, Function
from tensorplay_jax.autograd.function import once_differentiable

X = np.array([0.5, -1.0, 2.0], np.float32)
Y = np.array([1.5, 2.0, -0.5], np.float32)


class ScaledProduct(Function):
    """(x * k * y, x + 1): two outputs, a non-Tensor argument, saved inputs."""

    seen: ClassVar[list] = []

    @staticmethod
    def forward(ctx, x, k, y):
        ScaledProduct.seen.append((ctx.needs_input_grad, tp.is_grad_enabled()))
        ctx.k = k
        ctx.save_for_backward(x, y)
        return x * k * y, x + 1

    @staticmethod
    @once_differentiable
    def backward(ctx, g1, g2):
        x, y = ctx.saved_tensors
        return g1 * ctx.k * y + g2, None, g1 * ctx.k * x


class Cube(Function):
    calls = 0

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x**3

    @staticmethod
    def backward(ctx, g):
        Cube.calls += 1
        (x,) = ctx.saved_tensors
        return g * 3 * x**2


def _close(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)


def test_value_and_gradient_match_jax_grad(deferred):
    x = tp.tensor(X, requires_grad=True)
    y = Cube.apply(x * 2.0)
    (y * tp.tensor(Y)).sum().backward()
    want = jax.grad(lambda v: jnp.sum((2 * v) ** 3 * Y))(jnp.asarray(X))
    _close(y.detach().numpy(), (2 * X) ** 3)
    _close(x.grad.numpy(), want)


def test_two_outputs_a_number_argument_and_saved_tensors(deferred):
    x = tp.tensor(X, requires_grad=True)
    y = tp.tensor(Y, requires_grad=True)
    a, b = ScaledProduct.apply(x, 3.0, y)
    assert a.grad_fn is b.grad_fn and (a.output_nr, b.output_nr) == (0, 1)
    (a.sum() + (b * 2.0).sum()).backward()
    _close(x.grad.numpy(), 3.0 * Y + 2.0)  # d/dx: k*y from a, 2 from b
    _close(y.grad.numpy(), 3.0 * X)


def test_forward_runs_without_grad_and_sees_needs_input_grad():
    ScaledProduct.seen.clear()
    ScaledProduct.apply(tp.tensor(X, requires_grad=True), 2.0, tp.tensor(Y))
    assert ScaledProduct.seen == [((True, False, False), False)]


def test_unused_output_gets_zeros_in_backward():
    got = []

    class Two(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2, x * 3

        @staticmethod
        def backward(ctx, g1, g2):
            got.append(g2)
            return g1 * 2 + g2 * 3

    x = tp.tensor(X, requires_grad=True)
    a, _ = Two.apply(x)
    a.sum().backward()
    _close(got[0].numpy(), np.zeros(3))
    _close(x.grad.numpy(), np.full(3, 2.0))


def test_set_materialize_grads_false_passes_none():
    got = []

    class Two(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.set_materialize_grads(False)
            return x * 2, x * 3

        @staticmethod
        def backward(ctx, g1, g2):
            got.append(g2)
            return g1 * 2

    x = tp.tensor(X, requires_grad=True)
    Two.apply(x)[0].sum().backward()
    assert got == [None]


def test_mark_non_differentiable_output_needs_no_grad():
    class SortedIdx(Function):
        @staticmethod
        def forward(ctx, x):
            idx = x.argmax()
            ctx.mark_non_differentiable(idx)
            return x * 2, idx

        @staticmethod
        def backward(ctx, g, g_idx):
            return g * 2

    x = tp.tensor(X, requires_grad=True)
    y, idx = SortedIdx.apply(x)
    assert (y.requires_grad, idx.requires_grad) == (True, False)
    assert int(idx) == 2
    y.sum().backward()
    _close(x.grad.numpy(), np.full(3, 2.0))


def test_output_that_is_an_input_is_a_new_tensor_with_the_node():
    class Identity(Function):
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, g):
            return g * 5

    x = tp.tensor(X, requires_grad=True)
    y = Identity.apply(x)
    assert y is not x and y.grad_fn.name == "IdentityBackward" and x.is_leaf
    y.sum().backward()
    _close(x.grad.numpy(), np.full(3, 5.0))


def test_next_functions_one_per_tensor_argument():
    x = tp.tensor(X, requires_grad=True)
    a, _ = ScaledProduct.apply(x, 2.0, tp.tensor(Y))
    (leaf, nr), none = a.grad_fn.next_functions
    assert isinstance(leaf, AccumulateGrad) and leaf.variable is x and nr == 0
    assert none == (None, 0)


def test_no_grad_mode_records_nothing():
    x = tp.tensor(X, requires_grad=True)
    with tp.no_grad():
        y = Cube.apply(x)
    assert not y.requires_grad and y.grad_fn is None


def test_autograd_grad_through_a_function():
    x = tp.tensor(X, requires_grad=True)
    (g,) = tp.autograd.grad(Cube.apply(x).sum(), x)
    _close(g.numpy(), 3 * X**2)
    assert x.grad is None


def test_gradient_of_a_broadcast_shape_is_summed_to_the_input():
    class Spread(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, g):
            return g.expand(2, 3)  # torch sums a gradient the input broadcasts to

    x = tp.tensor(X, requires_grad=True)
    Spread.apply(x).sum().backward()
    _close(x.grad.numpy(), np.full(3, 2.0))


def test_split_forward_with_setup_context():
    class Square(Function):
        @staticmethod
        def forward(x):
            return x * x

        @staticmethod
        def setup_context(ctx, inputs, output):
            (ctx.x,) = inputs

        @staticmethod
        def backward(ctx, g):
            return 2 * ctx.x * g

    x = tp.tensor(X, requires_grad=True)
    Square.apply(x).sum().backward()
    _close(x.grad.numpy(), 2 * X)


@pytest.mark.parametrize("deferred_flag", [True, False])
def test_recurring_step_runs_the_function_backward_every_time(deferred_flag):
    old = tp.autograd.set_deferred(deferred_flag)
    try:
        w = tp.tensor(X, requires_grad=True)
        before = Cube.calls
        for _ in range(8):
            w.grad = None
            ((Cube.apply(w * 2.0) * 3.0).sum() * 1.0).backward()
            _close(w.grad.numpy(), 3 * 3 * 2 * (2 * X) ** 2)
        assert Cube.calls == before + 8
    finally:
        tp.autograd.set_deferred(old)


def test_error_raised_in_backward_propagates():
    class Fails(Function):
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, g):
            raise ValueError("Simulate error on backward pass")

    with pytest.raises(ValueError, match="Simulate error on backward pass"):
        Fails.apply(tp.tensor(X, requires_grad=True)).sum().backward()


def test_wrong_number_of_gradients_is_torchs_error():
    class OneGrad(Function):
        @staticmethod
        def forward(ctx, x, y):
            return x * y

        @staticmethod
        def backward(ctx, g):
            return (g,)

    x = tp.tensor(X, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"incorrect number of gradients \(expected 2, got 1\)"):
        OneGrad.apply(x, x).sum().backward()


def test_extra_none_gradients_are_allowed():
    class Extra(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2, None

    x = tp.tensor(X, requires_grad=True)
    Extra.apply(x).sum().backward()
    _close(x.grad.numpy(), np.full(3, 2.0))


def test_gradient_for_a_non_tensor_argument_is_torchs_error():
    class BadNumberGrad(Function):
        @staticmethod
        def forward(ctx, x, k):
            return x * k

        @staticmethod
        def backward(ctx, g):
            return g, g

    x = tp.tensor(X, requires_grad=True)
    with pytest.raises(RuntimeError, match="gradient different than None at position 2"):
        BadNumberGrad.apply(x, 2).sum().backward()


def test_gradient_of_a_wrong_shape_is_torchs_error():
    class Short(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g[:2]

    x = tp.tensor(X, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"got \[2\] but expected shape compatible with \[3\]"):
        Short.apply(x).sum().backward()


def test_saved_tensors_after_backward_are_freed():
    y = Cube.apply(tp.tensor(X, requires_grad=True) * 1.0)
    y.sum().backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.grad_fn.saved_tensors  # noqa: B018
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.sum().backward()


def test_saved_tensor_written_in_place_is_torchs_error():
    w = tp.tensor(X, requires_grad=True) * 1.0
    y = Cube.apply(w)
    with tp.no_grad():
        w.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_legacy_instance_call_is_refused():
    with pytest.raises(RuntimeError, match=r"Cube.apply\(\.\.\.\)"):
        Cube()(tp.tensor(X))
