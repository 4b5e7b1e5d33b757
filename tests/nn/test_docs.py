"""The runnable examples in the nn docstrings run and print what they claim."""

import doctest
import importlib

import pytest

MODULES = [
    "tensorplay_jax.nn._activation",
    "tensorplay_jax.nn._container",
    "tensorplay_jax.nn._conv",
    "tensorplay_jax.nn._functional_call",
    "tensorplay_jax.nn._linear",
    "tensorplay_jax.nn._loss",
    "tensorplay_jax.nn._module",
    "tensorplay_jax.nn._normalization",
    "tensorplay_jax.nn._parameter",
    "tensorplay_jax.nn._sparse",
    "tensorplay_jax.nn.functional",
    "tensorplay_jax.nn.init",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
