"""Builds the one optional C extension; everything else is in pyproject.toml.

``tensorplay_jax.rpc._spin`` lets same-host RPC readers spin briefly with the
GIL released before they sleep. ``optional=True``: without a C compiler the
install still succeeds and readers block at once (correct, slower).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "tensorplay_jax.rpc._spin",
            ["tensorplay_jax/rpc/_spin.c"],
            optional=True,
            extra_compile_args=["-O2"],
        )
    ]
)
