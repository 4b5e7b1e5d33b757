"""The runnable examples in the tensor library's docstrings run and print what they claim."""

import doctest
import importlib

import pytest

MODULES = [
    "tensorplay_jax.tensors",
    "tensorplay_jax.tensors._factories",
    "tensorplay_jax.tensors._methods",
    "tensorplay_jax.tensors._ops",
    "tensorplay_jax.tensors._random",
    "tensorplay_jax.tensors._reductions",
    "tensorplay_jax.tensors._shape_ops",
    "tensorplay_jax.tensors._tensor",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
