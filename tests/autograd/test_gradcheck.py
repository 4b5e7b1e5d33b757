"""``autograd.gradcheck`` / ``gradgradcheck``: the tape's Jacobians against finite differences.

The checks must pass for correct gradients and fail, naming the output and input, for
wrong ones: custom Functions with a known wrong backward (or a backward that is right
once but detached, so its second derivative is wrong) are the negative cases. Float32
cases widen the step and tolerances, as the module says; float64 with torch's defaults
runs in a fresh process with JAX's 64-bit mode on.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings

import pytest

import tensorplay_jax as tp
from tensorplay_jax.autograd import GradcheckError, gradcheck, gradgradcheck
from tensorplay_jax.runtime.settings import X64_ENV
from tests.autograd._custom_functions import Cube, DetachedBackward, WrongFactor

LOOSE = {"eps": 1e-3, "atol": 1e-2, "rtol": 1e-2}  # float32 finite differences


def _x() -> tp.Tensor:
    return tp.tensor([0.5, -1.0, 2.0], requires_grad=True)


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Input #", UserWarning)
        yield


def test_correct_gradients_pass():
    tp.manual_seed(0)
    a, w = tp.randn(4, 3, requires_grad=True), tp.randn(3, 2, requires_grad=True)
    assert gradcheck(tp.sin, (_x(),), **LOOSE)
    assert gradcheck(lambda a, w: (tp.tanh(a @ w), (a * a).sum()), (a, w), **LOOSE)
    assert gradcheck(Cube.apply, (_x(),), **LOOSE)
    assert gradcheck(lambda x, k: x * k, (_x(), 3.0), **LOOSE)  # a non-Tensor argument


def test_a_wrong_backward_is_named():
    named = "Jacobian mismatch for output 0 with respect to input 0"
    with pytest.raises(GradcheckError, match=named):
        gradcheck(WrongFactor.apply, (_x(),), **LOOSE)
    assert gradcheck(WrongFactor.apply, (_x(),), raise_exception=False, **LOOSE) is False


def test_the_second_input_is_named():
    def f(a, b):
        return a * 2 + WrongFactor.apply(b)

    with pytest.raises(GradcheckError, match="for output 0 with respect to input 1"):
        gradcheck(f, (_x(), _x()), **LOOSE)


def test_gradgradcheck_checks_the_second_derivative():
    tp.manual_seed(1)
    a, w = tp.randn(4, 3, requires_grad=True), tp.randn(3, 2, requires_grad=True)
    assert gradgradcheck(lambda a, w: tp.tanh(a @ w).sum(1), (a, w), **LOOSE)
    assert gradgradcheck(Cube.apply, (_x(),), **LOOSE)
    assert gradcheck(DetachedBackward.apply, (_x(),), **LOOSE)  # first order is right
    with pytest.raises(GradcheckError, match="Jacobian mismatch"):
        gradgradcheck(DetachedBackward.apply, (_x(),), **LOOSE)


def test_torchs_warnings_and_errors():
    with pytest.warns(UserWarning, match="Input #0 requires gradient and is not a double"):
        warnings.filterwarnings("default", "Input #", UserWarning)
        gradcheck(tp.sin, (_x(),), **LOOSE)
    with pytest.raises(ValueError, match="at least one input tensor to require gradient"):
        gradcheck(tp.sin, (tp.ones(2),))
    with pytest.raises(NotImplementedError, match="check_forward_ad=True is not supported"):
        gradcheck(tp.sin, (_x(),), check_forward_ad=True)


_X64 = """
    import json
    import tensorplay_jax as tp
    from tensorplay_jax.autograd import Function, gradcheck, gradgradcheck

    class Wrong(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x**2

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 2.01 * x  # off by 0.5%: over torch's rtol of 0.1%

    tp.manual_seed(0)
    a = tp.randn(3, 4, dtype=tp.float64, requires_grad=True)
    w = tp.randn(4, 2, dtype=tp.float64, requires_grad=True)
    f = lambda a, w: tp.tanh(a @ w).sum(1)
    print(json.dumps({
        "first": gradcheck(f, (a, w)),
        "second": gradgradcheck(f, (a, w)),
        "wrong": gradcheck(Wrong.apply, (a,), raise_exception=False),
    }))
"""


def test_float64_with_torchs_defaults():
    env = {**os.environ, X64_ENV: "1", "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    out = subprocess.run(
        [sys.executable, "-W", "error::UserWarning", "-c", textwrap.dedent(_X64)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"first": True, "second": True, "wrong": False}
