"""Double precision: float64 works with JAX's 64-bit mode on, and asking for it without raises.

Each case runs in a new Python process with the switch set or unset
(``JAX_ENABLE_X64``, read when JAX starts), so this test process's mode does
not matter. The oracle is NumPy float64.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tensorplay_jax.runtime.settings import X64_ENV

_TIMEOUT_S = 120


def _run(code: str, x64: bool) -> dict:
    """Run ``code`` (which prints one JSON line last) in a fresh process; that line, parsed."""
    env = {k: v for k, v in os.environ.items() if k != X64_ENV}
    if x64:
        env[X64_ENV] = "1"
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=_TIMEOUT_S,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


_COMPUTE = """
    import json, warnings
    import numpy as np
    import tensorplay_jax as tp

    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((5, 4)), rng.standard_normal((4, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing may be truncated
        x = tp.tensor(a, requires_grad=True)
        w = tp.from_numpy(b)
        y = (x @ w).tanh().sum() * tp.ones(1, dtype=tp.float64).double()
        y.backward()
    want = np.tanh(a @ b).sum()
    want_grad = (1 - np.tanh(a @ b) ** 2) @ b.T
    print(json.dumps({
        "dtypes": [str(x.dtype), str(w.dtype), str(y.dtype), str(x.grad.dtype)],
        "err": float(abs(y.item() - want)),
        "grad_err": float(np.abs(np.asarray(x.grad.value) - want_grad).max()),
    }))
"""


def test_with_the_switch_float64_matches_numpy_float64():
    got = _run(_COMPUTE, x64=True)
    assert got["dtypes"] == ["float64"] * 4
    assert got["err"] < 1e-12 and got["grad_err"] < 1e-12, got


_ASK = """
    import json
    import numpy as np
    import tensorplay_jax as tp

    cases = {{
        "tensor": lambda: tp.tensor([1.0], dtype=tp.float64),
        "tensor-of-array": lambda: tp.tensor(tp.ones(2).value, dtype=tp.double),
        "ones": lambda: tp.ones(2, dtype=tp.float64),
        "zeros_like": lambda: tp.zeros_like(tp.ones(2), dtype=tp.float64),
        "randn": lambda: tp.randn(2, dtype=tp.float64),
        "arange": lambda: tp.arange(3, dtype=tp.float64),
        "double": lambda: tp.ones(2).double(),
        "to": lambda: tp.ones(2).to(np.float64),
        "module": lambda: tp.nn.Linear(2, 2).double(),
    }}
    out = {{}}
    for name, fn in cases.items():
        try:
            fn()
            out[name] = "no error"
        except {exc} as e:
            out[name] = f"{{type(e).__name__}}: {{e}}"
    print(json.dumps(out))
"""


def test_without_the_switch_asking_for_float64_raises_naming_it():
    got = _run(_ASK.format(exc="TypeError"), x64=False)
    for name, err in got.items():
        assert err.startswith("Float64DisabledError"), (name, err)
        assert "JAX_ENABLE_X64=1" in err and 'jax.config.update("jax_enable_x64", True)' in err
        assert "dtype=float64" in err, (name, err)


_DATA = """
    import json, warnings
    import numpy as np
    import tensorplay_jax as tp
    from tensorplay_jax.runtime.x64 import Float64TruncatedWarning

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        t = tp.tensor(np.ones(3))
        u = tp.from_numpy(np.ones(3))
        v = tp.tensor([1.0, 2.0])  # Python floats are float32, as tensorplay's default
    kinds = [(w.category.__name__, str(w.message)) for w in seen]
    print(json.dumps({"dtypes": [str(t.dtype), str(u.dtype), str(v.dtype)], "warnings": kinds}))
"""


def test_without_the_switch_float64_data_warns_naming_it():
    got = _run(_DATA, x64=False)
    assert got["dtypes"] == ["float32"] * 3
    assert [c for c, _ in got["warnings"]] == ["Float64TruncatedWarning"] * 2, got
    for _, message in got["warnings"]:
        assert "float64 data becomes float32" in message and "JAX_ENABLE_X64=1" in message


@pytest.mark.parametrize("x64", [False, True], ids=["off", "on"])
def test_float32_requests_never_warn_or_raise(x64):
    code = """
        import json, warnings
        import numpy as np
        import tensorplay_jax as tp
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            t = tp.tensor(np.ones(3, np.float32)).float() + tp.ones(3, dtype=tp.float32)
        print(json.dumps({"dtype": str(t.dtype)}))
    """
    assert _run(code, x64=x64) == {"dtype": "float32"}
