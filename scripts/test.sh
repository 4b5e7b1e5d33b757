#!/usr/bin/env bash
# Run the test suite: ./scripts/test.sh [pytest args...]
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
set +e
# Bytecode for the package and the tests, written once here: the suite starts hundreds of
# Python processes, and where PYTHONDONTWRITEBYTECODE is set each would compile every
# module it imports from source (0.26 s of CPU a process for the package alone here).
python -m compileall -q -j 0 tensorplay_jax tests examples >/dev/null
# Three xdist workers, each taking whole test files (--dist loadfile): a module's tests then
# share one dist_workers_module job (and every other module-scoped fixture) instead of
# each xdist worker starting its own. Three on a 2-core machine: many tests spend their
# time waiting (on worker processes, sockets, timeouts), and a third worker fills the
# cores meanwhile (13 against 15 minutes here).
# --durations: the slowest tests close every run's output, so a run that takes longer
# than the last one shows where the time went.
python -m pytest -n "${PYTEST_WORKERS:-3}" --dist loadfile --durations=25 "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "[test] pytest collected no tests: failing" >&2
  exit 1
fi
exit "$rc"
