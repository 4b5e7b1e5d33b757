"""Fixtures shared by the tape's tests."""

from __future__ import annotations

import pytest

import tensorplay_jax as tp


@pytest.fixture(params=[True, False], ids=["deferred", "eager"])
def deferred(request):
    """The test once with deferred recording (the speed-up layer) on, once with it off."""
    old = tp.autograd.set_deferred(request.param)
    yield request.param
    tp.autograd.set_deferred(old)
