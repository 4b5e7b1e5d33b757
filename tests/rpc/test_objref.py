"""Classes and functions on the wire (``rpc/_objref``): by name, by value, the cache, the errors."""

from __future__ import annotations

import functools
import sys
import threading

import jax
import pytest

from tensorplay_jax.rpc import _codec, _objref

SCALE = 2
_lock = threading.Lock()


def _roundtrip(obj, main=False):
    return _codec.decode(_codec.encode(obj, main=main))


@pytest.fixture
def in_main(monkeypatch):
    """Put an object into ``__main__`` under ``name``, as a main script's top level would."""

    def put(obj, name, module="__main__"):
        obj.__module__, obj.__qualname__ = module, name
        monkeypatch.setattr(sys.modules["__main__"], name, obj, raising=False)
        return obj

    return put


def _make_scaler():
    def scale(x):
        return x * SCALE

    return scale


def test_main_functions_go_by_name_to_the_same_script_else_by_value(in_main):
    f = in_main(_make_scaler(), "tpj_scale")
    by_name = _codec.encode([f, 1], main=True).header
    assert b"__main__" in by_name and b"tpj_scale" in by_name and len(by_name) < 60
    assert _roundtrip(f, main=True) is f  # resolved in (this process's) __main__
    copy = _roundtrip(f, main=False)
    assert copy is not f and copy(3) == 6  # by value, with its globals
    assert len(_codec.encode(f).header) > 200


def test_multiprocessing_main_name_is_main(in_main):
    f = in_main(_make_scaler(), "tpj_mp_scale", module="__mp_main__")
    assert _objref.objref(f, main=True) == ["__main__", "tpj_mp_scale"]


def test_lambdas_and_closures_go_by_value_even_to_the_same_script():
    k = 3
    closure = lambda x: x + k
    assert _objref.objref(closure, main=True)[0] is None
    assert _roundtrip(closure, main=True)(1) == 4


def test_main_objects_inside_pickles_go_by_name(in_main):
    f = in_main(_make_scaler(), "tpj_inner")
    part = _roundtrip(functools.partial(f, 5), main=True)
    assert part.func is f and part() == 10
    assert _roundtrip(functools.partial(f, 5)).func is not f


def test_jitted_main_function_goes_by_name(in_main):
    jitted = in_main(jax.jit(_make_scaler()), "tpj_jitted")
    assert _objref.main_name(jitted) == "tpj_jitted"
    assert _roundtrip(jitted, main=True) is jitted


def test_unreachable_main_function_goes_by_value(in_main):
    f = in_main(_make_scaler(), "tpj_shadowed")
    sys.modules["__main__"].tpj_shadowed = _make_scaler()  # the name now means another function
    assert _objref.main_name(f) is None
    assert _objref.objref(f, main=True)[0] is None


def test_by_value_bytes_are_cached_while_captured_values_stay(monkeypatch):
    f = _make_scaler()
    first = _objref.by_value(f)
    assert _objref.by_value(f) is first  # cached: no second pickle
    monkeypatch.setattr(sys.modules[__name__], "SCALE", 7)
    fresh = _objref.by_value(f)
    assert fresh is not first and _objref.loads(fresh)(1) == 7  # a rebound global is seen


def test_by_value_is_not_cached_for_mutable_captures():
    box = [1]

    def read():
        return box[0]

    first = _objref.by_value(read)
    box[0] = 2
    assert _objref.loads(_objref.by_value(read))() == 2  # carries the current contents
    assert _objref.loads(first)() == 1


def test_unsendable_function_gets_a_clear_error(in_main):
    def locked():
        with _lock:
            return 1

    with pytest.raises(TypeError) as e:
        _codec.encode(locked)
    msg = str(e.value)
    for part in ("locked", "nested function", "pickling it failed", "_thread.lock", "can import"):
        assert part in msg, (part, msg)
    main_locked = in_main(locked, "tpj_locked")
    with pytest.raises(TypeError, match=r"tpj_locked.*main script"):
        _codec.encode(main_locked)
    assert _roundtrip(main_locked, main=True) is main_locked  # by name: the lock stays home


def test_missing_main_name_on_the_receiver_is_explained():
    with pytest.raises(_codec.DecodeError, match=r"main script.*top level"):
        _objref.load_objref(["__main__", "tpj_no_such_function"])


def test_main_identity_is_stable():
    ident = _objref.main_identity()
    assert ident == _objref.main_identity()
    assert ident is None or len(ident.rsplit(":", 1)[1]) == 32
