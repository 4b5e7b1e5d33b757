"""The seed example of issue 4 as written, RPC-not-initialized errors, docstring examples."""

from __future__ import annotations

from tests.distributed.autograd import _workers as W

DOCS = """
import doctest, importlib
mods = ["", "._context", "._engine", ".api", "._wire", "._functional"]
for m in mods:
    mod = importlib.import_module("tensorplay_jax.distributed.autograd" + m)
    res = doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert res.failed == 0, (m, res)
    print(m or "package", res.attempted, flush=True)
"""


def test_seed_example_one_worker(workers):
    out = workers(W.seed, 1, timeout=120)
    assert "[2. 2. 2. 2.]" in out[0].stdout, out[0]


def test_seed_example_three_workers(workers):
    out = workers(W.seed_multi, 3, timeout=120)
    assert "[4. 4. 4. 4.]" in out[0].stdout, out[0]


def test_docstring_examples(workers):
    out = workers(DOCS, 1, timeout=120)
    assert "package" in out[0].stdout and "._engine" in out[0].stdout, out[0]
