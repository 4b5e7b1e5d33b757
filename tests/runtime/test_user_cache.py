"""The per-user compilation cache: a rerun of a program loads what the first run compiled.

Each test runs real Python processes that import tensorplay_jax with a cache
folder of the test's own (``XDG_CACHE_HOME`` or ``TENSORPLAY_JAX_CACHE_DIR``;
the test run's own ``JAX_COMPILATION_CACHE_DIR`` removed) and count JAX's
persistent-cache events with ``jax.monitoring`` listeners.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tensorplay_jax.runtime.compile_cache import job_cache_env, prune, user_cache_dir

PROGRAM = textwrap.dedent(
    """\
    import json, os, sys

    import jax

    HIT, MISS = "/jax/compilation_cache/cache_hits", "/jax/compilation_cache/cache_misses"
    seen = []
    jax.monitoring.register_event_listener(lambda event, **_: seen.append(event))

    import numpy as np
    import tensorplay_jax  # noqa: F401  (configures the cache)

    scale = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
    out = jax.jit(lambda x: x * scale + 1.0)(np.arange(4, dtype=np.float32))
    print(json.dumps({
        "dir": jax.config.jax_compilation_cache_dir,
        "value": out.tolist(),
        "hits": seen.count(HIT),
        "misses": seen.count(MISS),
    }))
    """
)


def _env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE", "TENSORPLAY_JAX_"))
    }
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH")) if p
    )
    return {**env, **extra}


def _run(tmp_path: Path, env: dict[str, str], *args: str) -> dict:
    script = tmp_path / "program.py"
    script.write_text(PROGRAM)
    proc = subprocess.run(
        [sys.executable, str(script), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def test_a_rerun_loads_what_the_first_run_compiled(tmp_path) -> None:
    env = _env(XDG_CACHE_HOME=str(tmp_path / "xdg"))
    first, second = _run(tmp_path, env), _run(tmp_path, env)
    assert (first["misses"], second["misses"]) == (1, 0)
    assert second["hits"] == 1
    assert second["value"] == [1.0, 4.0, 7.0, 10.0]


def test_the_cache_lives_under_xdg_cache_home_by_version(tmp_path) -> None:
    import jax
    import jaxlib

    got = _run(tmp_path, _env(XDG_CACHE_HOME=str(tmp_path / "xdg")))
    where = Path(got["dir"])
    assert where.parent == tmp_path / "xdg" / "tensorplay_jax"
    assert where.name.startswith(f"jax-{jax.__version__}-jaxlib-{jaxlib.__version__}-")
    assert any(p.name.endswith("-cache") for p in where.iterdir())


def test_the_folder_setting_moves_it(tmp_path) -> None:
    got = _run(tmp_path, _env(TENSORPLAY_JAX_CACHE_DIR=str(tmp_path / "mine")))
    assert Path(got["dir"]).parent == tmp_path / "mine"


def test_other_xla_flags_never_reuse_an_entry(tmp_path) -> None:
    base = _env(XDG_CACHE_HOME=str(tmp_path / "xdg"))
    first = _run(tmp_path, base)
    other = _run(tmp_path, {**base, "XLA_FLAGS": "--xla_cpu_enable_fast_math=false"})
    assert first["dir"] != other["dir"]
    assert (other["hits"], other["misses"]) == (0, 1)


def test_turning_it_off_leaves_jax_uncached(tmp_path) -> None:
    env = _env(XDG_CACHE_HOME=str(tmp_path / "xdg"), TENSORPLAY_JAX_COMPILATION_CACHE="0")
    got = _run(tmp_path, env)
    assert got["dir"] is None
    assert not (tmp_path / "xdg").exists()


def test_a_cache_the_user_chose_is_left_alone(tmp_path) -> None:
    mine = str(tmp_path / "jax-own")
    got = _run(tmp_path, _env(XDG_CACHE_HOME=str(tmp_path / "xdg"), JAX_COMPILATION_CACHE_DIR=mine))
    assert got["dir"] == mine
    assert not (tmp_path / "xdg").exists()


def test_a_bad_switch_value_stops_the_import_with_its_name(tmp_path) -> None:
    script = tmp_path / "bad.py"
    script.write_text("import tensorplay_jax\n")
    env = _env(XDG_CACHE_HOME=str(tmp_path / "xdg"), TENSORPLAY_JAX_COMPILATION_CACHE="yes")
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode != 0
    assert "TENSORPLAY_JAX_COMPILATION_CACHE='yes' is neither 0 nor 1" in proc.stderr


def test_processes_compiling_at_once_all_get_the_right_value(tmp_path) -> None:
    script = tmp_path / "program.py"
    script.write_text(PROGRAM)
    env = _env(XDG_CACHE_HOME=str(tmp_path / "xdg"))
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(k % 2 + 2)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for k in range(4)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [e for _, e in outs]
    values = [json.loads(o.splitlines()[-1])["value"] for o, _ in outs]
    assert values == [[1.0, 3.0, 5.0, 7.0], [1.0, 4.0, 7.0, 10.0]] * 2
    after = _run(tmp_path, env, "2")  # what they wrote is whole: a later run reads it
    assert (after["hits"], after["misses"]) == (1, 0)


def _entries(folder: Path, sizes: list[int], start: float) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    made = []
    for i, n in enumerate(sizes):
        p = folder / f"k{i}-cache"
        p.write_bytes(bytes(n))
        os.utime(p, (start + i, start + i))
        made.append(p)
    return made


def test_prune_removes_the_least_recently_used_entries_of_every_version(tmp_path) -> None:
    old = _entries(tmp_path / "jax-old", [400, 400], start=1000.0)
    new = _entries(tmp_path / "jax-new", [400, 400], start=2000.0)
    removed = prune(tmp_path, max_bytes=1000)
    assert removed == 800
    assert [p.exists() for p in old + new] == [False, False, True, True]


def test_prune_leaves_a_cache_within_its_bound_alone(tmp_path) -> None:
    made = _entries(tmp_path / "v", [100, 100], start=1000.0)
    assert prune(tmp_path, max_bytes=200) == 0
    assert all(p.exists() for p in made)


def test_a_starting_process_prunes_the_cache_to_its_size_setting(tmp_path) -> None:
    root = tmp_path / "xdg" / "tensorplay_jax"
    stale = _entries(root / "jax-stale", [600_000, 600_000], start=time.time() - 86400)
    env = _env(XDG_CACHE_HOME=str(tmp_path / "xdg"), TENSORPLAY_JAX_COMPILATION_CACHE_MAX_MB="1")
    _run(tmp_path, env)
    assert [p.exists() for p in stale] == [False, True]


def test_spawned_workers_get_this_process_cache(tmp_path) -> None:
    env = {"XDG_CACHE_HOME": str(tmp_path)}
    got = job_cache_env("spawn", environ=env)
    assert got["JAX_COMPILATION_CACHE_DIR"] == user_cache_dir(env)
    assert got["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] == "0"


@pytest.mark.parametrize("bad", ["0", "-5", "lots"])
def test_a_bad_size_bound_is_named(tmp_path, bad) -> None:
    from tensorplay_jax.runtime.compile_cache import configure

    env = {"XDG_CACHE_HOME": str(tmp_path), "TENSORPLAY_JAX_COMPILATION_CACHE_MAX_MB": bad}
    with pytest.raises(ValueError, match="TENSORPLAY_JAX_COMPILATION_CACHE_MAX_MB"):
        configure(env)
