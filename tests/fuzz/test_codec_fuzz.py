"""Fuzzing the RPC codec (``decode``, ``loads_small``): every input decodes or raises DecodeError.

An authenticated peer's bytes reach these decoders (message headers and
envelopes). Inputs: random bytes, and msgpack documents built of random
values and the codec's extension records (with random payloads), so that
the decoder's structure is reached, not just msgpack's first byte check.
"""

from __future__ import annotations

import contextlib

import msgpack
from hypothesis import given
from hypothesis import strategies as st

from tensorplay_jax.rpc import _codec
from tensorplay_jax.rpc._wire_types import DecodeError
from tests.fuzz._fuzz import fuzz

_CODES = list(range(0, 16))
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=True),
    st.text(max_size=16),
    st.binary(max_size=32),
    st.sampled_from(["float32", "int8", "bool", "object", "V0", "<U3", "cpu", "RRef", "PyTree"]),
)


def _ext(children):
    payload = st.one_of(
        st.binary(max_size=48),
        children.map(lambda v: msgpack.packb(v, use_bin_type=True, default=_default)),
    )
    return st.builds(msgpack.ExtType, st.sampled_from(_CODES), payload)


def _default(o):
    if isinstance(o, msgpack.ExtType):
        return o
    raise TypeError(type(o))


values = st.recursive(
    _scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=6),
        st.dictionaries(st.one_of(st.text(max_size=8), st.integers(-3, 3)), children, max_size=4),
        _ext(children),
    ),
    max_leaves=12,
)
documents = values.map(lambda v: msgpack.packb(v, use_bin_type=True, default=_default))
buffers = st.lists(st.binary(max_size=64).map(memoryview), max_size=3)


def _decode(header: bytes, bufs: list) -> None:
    with contextlib.suppress(DecodeError):
        _codec.decode(header, bufs)


@fuzz(ci=300)
@given(header=st.binary(max_size=256), bufs=buffers)
def test_decode_random_bytes(header, bufs):
    _decode(header, bufs)


@fuzz(ci=300)
@given(header=documents, bufs=buffers)
def test_decode_random_documents(header, bufs):
    _decode(header, bufs)


@fuzz(ci=300)
@given(data=st.one_of(st.binary(max_size=256), documents))
def test_loads_small(data):
    with contextlib.suppress(DecodeError):
        _codec.loads_small(data)
