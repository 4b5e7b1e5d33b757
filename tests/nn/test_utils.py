"""``nn.utils``: gradient clipping and parameters as a vector; ``tp.inference_mode``.

The clipped values are checked against the formula in NumPy and against torch 2.13's
answers for the same gradients, written out."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay_jax as tp
from tensorplay_jax.nn.utils import (
    clip_grad_norm_,
    clip_grad_value_,
    get_total_norm,
    parameters_to_vector,
    vector_to_parameters,
)

A = np.array([[1.0, -2.0], [3.0, 0.5]], np.float32)
B = np.array([4.0, -1.0, 2.0], np.float32)


def _params():
    a, b, c = (
        tp.nn.Parameter(tp.zeros(2, 2)),
        tp.nn.Parameter(tp.zeros(3)),
        tp.nn.Parameter(tp.zeros(1)),
    )
    a.grad, b.grad = tp.tensor(A), tp.tensor(B)  # c has no gradient: skipped
    return a, b, c


@pytest.mark.parametrize(
    ("max_norm", "norm_type", "torch_norm", "torch_a"),
    [
        (2.0, 2.0, 5.9372, [[0.3369, -0.6737], [1.0106, 0.1684]]),
        (1.5, float("inf"), 4.0, [[0.3750, -0.7500], [1.1250, 0.1875]]),
        (100.0, 1.0, 13.5, A.tolist()),  # under the bound: unchanged
    ],
)
def test_clip_grad_norm_rescales_in_place_and_returns_the_norm_before(
    max_norm, norm_type, torch_norm, torch_a
):
    a, b, c = _params()
    seen = a.grad  # a reference taken before: it sees the clipped values
    total = clip_grad_norm_([a, b, c], max_norm, norm_type=norm_type)
    flat = np.concatenate([A.ravel(), B])
    want = (
        np.max(np.abs(flat))
        if norm_type == float("inf")
        else np.sum(np.abs(flat) ** norm_type) ** (1 / norm_type)
    )
    assert total.item() == pytest.approx(want, rel=1e-6)
    assert total.item() == pytest.approx(torch_norm, abs=1e-4)
    coef = min(max_norm / (want + 1e-6), 1.0)
    np.testing.assert_allclose(a.grad.numpy(), A * coef, rtol=1e-6)
    np.testing.assert_allclose(b.grad.numpy(), B * coef, rtol=1e-6)
    np.testing.assert_allclose(seen.numpy(), torch_a, atol=1e-4)
    assert c.grad is None


def test_clip_grad_value_clamps_in_place():
    a, b, _ = _params()
    clip_grad_value_([a, b], 1.5)
    np.testing.assert_array_equal(a.grad.numpy(), [[1.0, -1.5], [1.5, 0.5]])  # torch's
    np.testing.assert_array_equal(b.grad.numpy(), [1.5, -1.0, 1.5])


def test_a_nonfinite_norm_raises_only_when_asked():
    a = tp.nn.Parameter(tp.zeros(2))
    a.grad = tp.tensor([float("inf"), 1.0])
    with pytest.raises(RuntimeError, match="non-finite"):
        clip_grad_norm_([a], 1.0, error_if_nonfinite=True)
    assert not np.isfinite(clip_grad_norm_([a], 1.0).item())
    assert clip_grad_norm_([tp.nn.Parameter(tp.zeros(2))], 1.0).item() == 0.0  # no gradients


def test_clipping_is_one_step_of_a_training_loop():
    tp.manual_seed(0)
    model = tp.nn.Linear(3, 1)
    opt = tp.optim.SGD(model.parameters(), lr=0.1)
    loss = (model(tp.randn(4, 3)) * 100).pow(2).sum()
    loss.backward()
    before = get_total_norm([p.grad for p in model.parameters()]).item()
    clip_grad_norm_(model.parameters(), 1.0)
    after = get_total_norm([p.grad for p in model.parameters()]).item()
    assert before > 1.0 and after == pytest.approx(1.0, rel=1e-5)
    opt.step()


def test_parameters_round_trip_through_one_vector():
    a, b = tp.nn.Parameter(tp.ones(2, 2)), tp.nn.Parameter(tp.zeros(3))
    vec = parameters_to_vector([a, b])
    assert vec.tolist() == [1.0] * 4 + [0.0] * 3
    vector_to_parameters(tp.arange(7.0), [a, b])
    assert a.tolist() == [[0.0, 1.0], [2.0, 3.0]] and b.tolist() == [4.0, 5.0, 6.0]
    with pytest.raises(ValueError, match="need 7"):
        vector_to_parameters(tp.arange(6.0), [a, b])


def test_inference_mode_records_nothing_as_a_block_or_a_decorator():
    x = tp.ones(2, requires_grad=True)

    @tp.inference_mode
    def bare():
        return (x * 2).requires_grad

    @tp.inference_mode()
    def called():
        return (x * 2).requires_grad

    with tp.inference_mode():
        inside = (x * 2).requires_grad
    with tp.inference_mode(False):
        off = (x * 2).requires_grad
    assert (bare(), called(), inside, off, tp.is_grad_enabled()) == (
        False,
        False,
        False,
        True,
        True,
    )
