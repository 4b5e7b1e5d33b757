"""The runnable example in every public collective's docstring runs and prints what it says."""

from __future__ import annotations

import doctest

import pytest

import tensorplay_jax.collectives as C

PUBLIC = [getattr(C, name) for name in C.__all__ if callable(getattr(C, name))]


@pytest.mark.parametrize("fn", [f for f in PUBLIC if f is not C.ReduceOp], ids=lambda f: f.__name__)
def test_docstring_example(fn):
    assert fn.__doc__ and ">>>" in fn.__doc__, f"{fn.__name__} has no runnable example"
    finder = doctest.DocTestFinder(recurse=False)
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    for test in finder.find(fn, fn.__name__, globs={}):
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.attempted > 0 and result.failed == 0
