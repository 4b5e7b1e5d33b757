"""``spawn`` imports the main script in its workers; their tracebacks name the user's lines.

One real script is run (``python script.py``): it seeds at its top level and
spawns two workers; rank 0 reports what it saw, rank 1 raises in a helper.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import traceback
from pathlib import Path

import pytest

import tensorplay_jax as tp
from tensorplay_jax.runtime import _main_script, pickling
from tensorplay_jax.runtime.launch import spawn

SCRIPT = textwrap.dedent(
    """\
    import json, os, sys, time
    import tensorplay_jax as tp
    from tensorplay_jax.rpc import spawn

    tp.manual_seed(543)
    OUT = sys.argv[1]
    GUARD_RAN = False


    def fail(rank):
        raise ValueError(f"worker {rank} failed here")


    def work(rank):
        if rank == 1:
            while not os.path.exists(os.path.join(OUT, "0.json")):
                time.sleep(0.05)
            fail(rank)
        seen = {
            "draw": tp.randn(3).tolist(),
            "main": sys.modules["__main__"].__name__,
            "argv": sys.argv[1:],
            "guard_ran": GUARD_RAN,
        }
        with open(os.path.join(OUT, "0.tmp"), "w") as f:
            json.dump(seen, f)
        os.replace(os.path.join(OUT, "0.tmp"), os.path.join(OUT, "0.json"))


    if __name__ == "__main__":
        GUARD_RAN = True
        try:
            spawn(work, 2, timeout=120)
        except RuntimeError as e:
            with open(os.path.join(OUT, "main.json"), "w") as f:
                json.dump({"spawn_error": str(e)}, f)
    """
)
FAIL_LINE = 1 + SCRIPT.splitlines().index('    raise ValueError(f"worker {rank} failed here")')


@pytest.fixture(scope="module")
def spawned(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, Path, subprocess.CompletedProcess]:
    root = tmp_path_factory.mktemp("spawn_main")
    script, out = root / "train.py", root / "out"
    script.write_text(SCRIPT)
    out.mkdir()
    proc = subprocess.run(
        [sys.executable, str(script), str(out)],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=root,
    )
    return script, out, proc


def test_workers_run_the_scripts_top_level(spawned) -> None:
    _, out, proc = spawned
    seen = json.loads((out / "0.json").read_text())
    tp.manual_seed(543)  # the oracle: this process seeded as the script's top level seeds
    assert seen["draw"] == pytest.approx(tp.randn(3).tolist(), rel=0, abs=0), proc.stderr


def test_workers_import_the_script_as_mp_main_with_the_parents_argv(spawned) -> None:
    _, out, _ = spawned
    seen = json.loads((out / "0.json").read_text())
    assert seen["main"] == "__mp_main__"
    assert seen["argv"] == [str(out)]
    assert seen["guard_ran"] is False  # the function ran with the worker's module globals


def test_a_workers_traceback_names_the_script_file_line_and_source(spawned) -> None:
    script, out, proc = spawned
    error = json.loads((out / "main.json").read_text())["spawn_error"]
    assert error.startswith("spawn: worker rank 1 exited with code 1"), error
    assert f'File "{script}", line {FAIL_LINE}, in fail' in proc.stderr
    assert 'raise ValueError(f"worker {rank} failed here")' in proc.stderr
    assert "<dynamic-code>" not in proc.stderr


def test_a_function_sent_by_value_keeps_its_file_and_line() -> None:
    def inner() -> None:
        raise KeyError("inner")

    line = inner.__code__.co_firstlineno + 1
    rebuilt = pickling.loads(pickling.dumps(inner))
    with pytest.raises(KeyError) as info:
        rebuilt()
    frame = traceback.extract_tb(info.value.__traceback__)[-1]
    assert (frame.filename, frame.lineno, frame.line) == (__file__, line, 'raise KeyError("inner")')


def test_spawn_from_a_worker_importing_the_script_is_refused(monkeypatch) -> None:
    monkeypatch.setattr(sys.modules["__main__"], _main_script.BOOTING, True, raising=False)
    with pytest.raises(RuntimeError, match=r"spawn: called while a spawned worker imports"):
        spawn(print, 1)
