"""The job's compilation cache: ``spawn``'s workers share one JAX cache directory.

The job's cache serves when the per-user cache is off
(``TENSORPLAY_JAX_COMPILATION_CACHE=0``, as every run here sets; the per-user cache is
``tests/runtime/test_user_cache.py``'s). One real script is run (``python script.py``,
without the test run's own ``JAX_COMPILATION_CACHE_DIR``). It spawns two workers that
compile the same function, rank 1 after rank 0; then one more worker (a later job of the
same script) that compiles it again; then, with the job cache turned off and after
setting its own ``jax.config`` cache directory, a worker each that reports the cache
variable it got. Each worker counts JAX's persistent-cache events with
``jax.monitoring`` listeners.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tensorplay_jax.runtime.compile_cache import job_cache_env
from tensorplay_jax.runtime.launch import spawn
from tests._procs import REPO_ROOT, handed_back
from tests._worker import OUT_DIR

SCRIPT = textwrap.dedent(
    """\
    import json, os, sys, time

    MARK = sys.argv[1]
    HIT, MISS = "/jax/compilation_cache/cache_hits", "/jax/compilation_cache/cache_misses"


    def compile_once(rank):
        import jax
        import numpy as np

        seen = []
        jax.monitoring.register_event_listener(lambda event, **_: seen.append(event))
        if rank == 1:  # compile after rank 0 has written its entry
            deadline = time.monotonic() + 60
            while not os.path.exists(MARK):
                assert time.monotonic() < deadline, "rank 0 never compiled"
                time.sleep(0.05)
        jax.jit(lambda x: x * 3.0 + 1.0)(np.arange(4, dtype=np.float32)).block_until_ready()
        if rank == 0:
            open(MARK, "w").close()
        cache = os.environ.get("JAX_COMPILATION_CACHE_DIR")
        return {"dir": cache, "isdir": bool(cache) and os.path.isdir(cache),
                "hits": seen.count(HIT), "misses": seen.count(MISS)}


    def cache_var(rank):
        return os.environ.get("JAX_COMPILATION_CACHE_DIR")


    if __name__ == "__main__":
        from tensorplay_jax.runtime.launch import spawn

        got = {"job": spawn(compile_once, 2, timeout=120)}
        got["later_job"] = spawn(compile_once, 1, timeout=120)
        os.environ["TENSORPLAY_JAX_JOB_COMPILATION_CACHE"] = "0"
        got["off"] = spawn(cache_var, 1, timeout=120)
        del os.environ["TENSORPLAY_JAX_JOB_COMPILATION_CACHE"]
        import jax

        jax.config.update("jax_compilation_cache_dir", os.path.dirname(MARK))
        got["own_config"] = spawn(cache_var, 1, timeout=120)
        print(json.dumps(got))
    """
)


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("compile_cache")
    script = root / "job.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_PERSISTENT_CACHE")}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    env["TENSORPLAY_JAX_COMPILATION_CACHE"] = "0"
    proc = subprocess.run(
        [sys.executable, str(script), str(root / "rank0-compiled")],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=root,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.splitlines()[-1])
    got["root"] = str(root)
    return got


def test_spawned_workers_share_one_cache_directory(ran) -> None:
    first, second = ran["job"]
    assert first["dir"] and first["dir"] == second["dir"] and first["isdir"]
    assert Path(first["dir"]).name.startswith("tpj-job-jax-cache-")


def test_the_second_worker_loads_what_the_first_compiled(ran) -> None:
    first, second = ran["job"]
    assert (first["hits"], first["misses"]) == (0, 1)
    assert (second["hits"], second["misses"]) == (1, 0)


def test_a_later_spawn_of_the_same_process_reuses_the_cache(ran) -> None:
    (later,) = ran["later_job"]
    assert later["dir"] == ran["job"][0]["dir"]
    assert (later["hits"], later["misses"]) == (1, 0)


def test_the_directory_is_removed_when_the_spawning_process_exits(ran) -> None:
    assert not os.path.exists(ran["job"][0]["dir"])


def test_turning_it_off_gives_the_workers_no_cache(ran) -> None:
    assert ran["off"] == [None]


def test_a_cache_set_in_the_spawning_process_jax_config_is_left_alone(ran) -> None:
    assert ran["own_config"] == [None]  # nothing added: the choice of cache stays the user's


def _cache_var(rank: int) -> str | None:
    return os.environ.get("JAX_COMPILATION_CACHE_DIR")


def test_the_users_cache_variable_reaches_the_workers_unchanged(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path))
    assert spawn(_cache_var, 1, timeout=120) == [str(tmp_path)]


def test_a_bad_switch_value_is_named() -> None:
    with pytest.raises(ValueError, match=r"spawn: TENSORPLAY_JAX_JOB_COMPILATION_CACHE='yes'"):
        job_cache_env("spawn", environ={"TENSORPLAY_JAX_JOB_COMPILATION_CACHE": "yes"})


def test_the_users_minimum_compile_time_is_kept() -> None:
    mine = {
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "2",
        "TENSORPLAY_JAX_COMPILATION_CACHE": "0",
    }
    env = job_cache_env("spawn", environ=mine)
    assert "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in env
    assert env["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] == "0"


def test_the_launchers_workers_get_a_cache_removed_at_exit(tmp_path) -> None:
    script = tmp_path / "show.py"
    script.write_text(
        "import os\nfrom tests._worker import hand_back\n"
        "hand_back({'cache': os.environ.get('JAX_COMPILATION_CACHE_DIR')})\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    env["TENSORPLAY_JAX_COMPILATION_CACHE"] = "0"
    env.update(PYTHONPATH=str(REPO_ROOT), **{OUT_DIR: str(tmp_path)})
    proc = subprocess.run(
        [sys.executable, "-m", "tensorplay_jax.run", "--nproc", "2", str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    dirs = [handed_back(tmp_path, rank, proc.stderr)["cache"] for rank in (0, 1)]
    assert dirs[0] == dirs[1], dirs  # both workers got the same one
    made = dirs[0]
    assert Path(made).name.startswith("tpj-job-jax-cache-")
    assert not os.path.exists(made)
