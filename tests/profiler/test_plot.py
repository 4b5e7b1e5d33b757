"""profiler.plot and ``python -m tensorplay_jax.profiler`` on a hand-made two-worker trace."""

from __future__ import annotations

import json

import pytest

from tensorplay_jax import profiler
from tensorplay_jax.profiler.__main__ import main
from tests.profiler.test_merge import _two_workers

matplotlib = pytest.importorskip("matplotlib")  # in the test extra; a core install lacks it
matplotlib.use("Agg")
Annotation = pytest.importorskip("matplotlib.text").Annotation


def _doc() -> dict:
    return profiler.merge(_two_workers())


def test_rows_nesting_and_arrows():
    doc = _doc()
    ax = profiler.plot(doc)
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["w0 / MainThread", "w0 / reader", "w1 / tpj-rpc-worker"]
    arrows = [c for c in ax.get_children() if isinstance(c, Annotation)]
    # the two matched arrows only (send f -> serve f, send reply -> reply f); g's has no end
    got = sorted((a.xyann[0], a.xy[0]) for a in arrows)
    ends = {}
    for e in doc["traceEvents"]:
        if e["ph"] in "sf":
            ends.setdefault(e["id"], {})[e["ph"]] = e["ts"] / 1e3
    assert got == sorted((v["s"], v["f"]) for v in ends.values())
    # w1's reply is sent inside its serve: drawn one lane below it, so its row is 2 lanes
    # high and the reply's arrow starts on the lower lane
    (reply_arrow,) = [a for a in arrows if a.xy[0] > a.xyann[0] and a.xyann[1] > a.xy[1]]
    assert reply_arrow.xyann[1] - ax.get_yticks()[2] > 0  # below the row's middle


def test_window_and_min_duration():
    ax = profiler.plot(_doc(), window_ms=(0.0, 0.0015), flows=False)  # the first 1.5 us
    assert [t.get_text() for t in ax.get_yticklabels()] == ["w0 / MainThread"]
    ax = profiler.plot(_doc(), min_us=2.0)  # only the serve (15 us) is that long
    assert [t.get_text() for t in ax.get_yticklabels()] == ["w1 / tpj-rpc-worker"]


def test_cli_prints_the_table_and_draws(tmp_path, capsys):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_doc()))
    png = tmp_path / "t.png"
    assert main([str(path), "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["worker", "name", "calls", "total", "ms", "mean",
                                           "ms", "p99", "ms", "bytes"]  # fmt: skip
    assert "serve call f" in out and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_refuses_a_file_that_is_not_a_trace(tmp_path, capsys):
    path = tmp_path / "x.json"
    path.write_text("{}")
    with pytest.raises(SystemExit):
        main([str(path)])
    assert "not a trace (no traceEvents)" in capsys.readouterr().err
