"""Runs this directory's tests of one transport together: a module starts one job per transport."""

from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).parent
_ORDER = {"local": 0, "tcp": 1, "grpc": 2}


def _transport(item) -> int:
    params = getattr(getattr(item, "callspec", None), "params", {})
    return _ORDER.get(params.get("transport"), -1)


def pytest_collection_modifyitems(config, items):
    where = [i for i, item in enumerate(items) if Path(item.fspath).parent == _HERE]
    mine = sorted((items[i] for i in where), key=lambda it: (str(it.fspath), _transport(it)))
    for i, item in zip(where, mine, strict=True):
        items[i] = item
