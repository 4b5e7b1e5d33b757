"""Store calls written once for torch's stores and ours: what each returns or raises.

:func:`outcomes` runs every call on one store and gives, per call, the ``repr`` of
what it returned or ``"raises <ExceptionClass>"``; the golden file holds torch's
(``golden/make_store_golden.py``), the tests compare ours with it.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

CALLS: list[tuple[str, Callable[[Any], Any]]] = [
    ("set", lambda s: s.set("a", "x")),
    ("get", lambda s: s.get("a")),
    ("set bytes", lambda s: s.set("b", b"\x00\xff")),
    ("get bytes", lambda s: s.get("b")),
    ("add new", lambda s: s.add("n", 5)),
    ("add again", lambda s: s.add("n", -2)),
    ("counter is digits", lambda s: s.get("n")),
    ("check", lambda s: (s.check(["a", "b"]), s.check(["a", "zz"]))),
    ("compare_set missing, expected empty", lambda s: s.compare_set("c", "", "v1")),
    ("compare_set missing, expected other", lambda s: s.compare_set("c2", "q", "v1")),
    ("compare_set missing leaves it missing", lambda s: s.check(["c2"])),
    ("compare_set match", lambda s: s.compare_set("c", "v1", "v2")),
    ("compare_set mismatch", lambda s: s.compare_set("c", "nope", "v3")),
    ("after compare_set", lambda s: s.get("c")),
    ("delete_key", lambda s: (s.delete_key("c"), s.check(["c"]))),
    ("append to missing", lambda s: s.append("ap", "x")),
    ("append", lambda s: (s.append("ap", b"y"), s.get("ap"))),
    ("multi_set", lambda s: s.multi_set(["m1", "m2"], ["1", b"2"])),
    ("multi_get", lambda s: s.multi_get(["m1", "m2"])),
    ("empty key", lambda s: (s.set("", "e"), s.get(""))),
    ("default timeout", lambda s: s.timeout),
    ("set_timeout", lambda s: s.set_timeout(datetime.timedelta(milliseconds=300))),
    ("timeout", lambda s: s.timeout),
    ("get of a missing key", lambda s: s.get("missing")),
    ("wait for a missing key", lambda s: s.wait(["missing", "a"])),
    ("wait with its own timeout", lambda s: s.wait(["missing"], datetime.timedelta(seconds=0.1))),
    ("wait for present keys", lambda s: s.wait(["a", "b"])),
    ("queue", lambda s: (s.queue_push("q", "1"), s.queue_push("q", b"2"), s.queue_len("q"))),
    ("queue_pop", lambda s: (s.queue_pop("q"), s.queue_pop("q", block=False), s.queue_len("q"))),
    ("queue_pop of an empty queue", lambda s: s.queue_pop("q", block=False)),
    ("queue_pop waits", lambda s: s.queue_pop("q")),
    ("a value not str or bytes", lambda s: s.set("i", 5)),
    ("has_extended_api", lambda s: s.has_extended_api()),
]


def outcomes(store: Any) -> dict[str, str]:
    """Each call of :data:`CALLS` on ``store``, in order: ``repr`` of its result, or
    ``"raises <class name>"``."""
    out = {}
    for name, call in CALLS:
        try:
            out[name] = repr(call(store))
        except Exception as e:
            out[name] = f"raises {type(e).__name__}"
    return out
