"""The runnable examples in the autograd docstrings run and print what they claim."""

import doctest
import importlib

import pytest

MODULES = [
    "tensorplay_jax.autograd",
    "tensorplay_jax.autograd._custom",
    "tensorplay_jax.autograd._engine",
    "tensorplay_jax.autograd._grad",
    "tensorplay_jax.autograd._grad_mode",
    "tensorplay_jax.autograd._lift",
    "tensorplay_jax.autograd._tensor_class",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
