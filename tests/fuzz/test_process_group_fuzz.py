"""Fuzzing the process groups' decoders of what other ranks publish.

- Per-call descriptors (``_descriptor.check``): any int64 rows a rank could
  publish give a verdict (an error message naming the disagreement, or None),
  never an exception of the checker's own.
- Signed coordination-store values (``_kv._open``): anything not signed with
  the job secret raises ``ForgedValue``; signed ones give their payload back.
- Object-collective payloads (``_objects._loads``): bytes not signed for the
  call are refused with a RuntimeError before any unpickling; signed bytes
  that do not unpickle raise a RuntimeError naming the sender.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from tensorplay_jax.process_group import _descriptor, _kv, _objects
from tensorplay_jax.runtime import secret as _secret
from tests.fuzz._fuzz import fuzz

KEY = "fuzz-secret"
_I64 = st.integers(-(2**63), 2**63 - 1)
_SMALL = st.integers(-3, 20)


@st.composite
def descriptor_rows(draw):
    n = draw(st.integers(1, 4))
    length = _descriptor.length(n)
    base = _descriptor.encode(n, "all_reduce", 10, (2, 3))
    rows = []
    for _ in range(n):
        row = base.copy()
        for _ in range(draw(st.integers(0, 4))):
            row[draw(st.integers(0, length - 1))] = draw(st.one_of(_SMALL, _I64))
        rows.append(row)
    if draw(st.booleans()):  # an all_to_all_single, whose splits are checked
        for row in rows:
            row[0] = _descriptor.OPS.index("all_to_all_single")
    ranks = tuple(draw(st.lists(st.integers(0, 64), min_size=n, max_size=n, unique=True)))
    return np.stack(rows), ranks


def _root_past_the_group() -> tuple[np.ndarray, tuple[int, ...]]:
    rows = np.stack([_descriptor.encode(2, "broadcast", 10, (2,), root=r) for r in (0, 2)])
    return rows, (0, 1)


def _reduce_op_past_the_codes() -> tuple[np.ndarray, tuple[int, ...]]:
    rows = np.stack([_descriptor.encode(2, "all_reduce", 10, (2,)) for _ in range(2)])
    rows[1, 2] = 99
    return rows, (0, 1)


@fuzz(ci=400)
@given(descriptor_rows())
@example(_root_past_the_group())  # before: IndexError in the checker
@example(_reduce_op_past_the_codes())  # before: IndexError in the checker
def test_descriptor_check_gives_a_verdict(case):
    descs, ranks = case
    verdict = _descriptor.check("all_reduce", descs, ranks)
    assert verdict is None or verdict.startswith("all_reduce: ")


@pytest.fixture
def job_secret():
    saved = _kv._SECRET
    _kv.use_secret(KEY)
    yield
    _kv._SECRET = saved


def _signed(key: str, payload: bytes) -> bytes:
    return _kv._MAGIC + _kv._mac(key, payload) + payload


@fuzz(ci=300)
@given(
    st.one_of(
        st.binary(max_size=80),
        st.binary(max_size=40).map(lambda b: _kv._MAGIC + b),
        st.binary(max_size=40).map(lambda b: _signed("other/key", b)),
    ),
    st.binary(max_size=40),
)
def test_signed_values_open_only_when_signed(job_secret, raw, payload):
    with pytest.raises(_kv.ForgedValue):
        _kv._open("init_process_group", "fuzz/key", raw)
    assert _kv._open("init_process_group", "fuzz/key", _signed("fuzz/key", payload)) == payload


_CTX = b"fuzz/all_gather_object/1"


def _tagged(data: bytes) -> np.ndarray:
    tag = _secret.mac(KEY, b"tpjax-obj\0" + _CTX + b"\0", data)
    return np.frombuffer(tag + data, np.uint8)


@fuzz(ci=300)
@given(st.binary(max_size=120))
def test_object_payloads_unsigned_are_refused(data):
    with pytest.raises(RuntimeError, match="refused the object from rank 3"):
        _objects._loads(np.frombuffer(data, np.uint8), _CTX, "all_gather_object", 3, KEY)


@fuzz(ci=300)
@given(st.one_of(st.binary(max_size=120), st.binary(max_size=60).map(lambda b: b"\x80\x05" + b)))
@example(b"")  # before: EOFError out of pickle
def test_object_payloads_signed_garbage_names_the_sender(data):
    try:
        _objects._loads(_tagged(data), _CTX, "all_gather_object", 3, KEY)
    except RuntimeError as e:
        assert "rank 3" in str(e), e
