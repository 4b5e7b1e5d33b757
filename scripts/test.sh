#!/usr/bin/env bash
# Run the test suite: ./scripts/test.sh [pytest args...]
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
set +e
# Two xdist workers: one runs the multi-process tests one at a time, the other the rest.
python -m pytest -n "${PYTEST_WORKERS:-2}" --dist loadgroup "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "[test] pytest collected no tests: failing" >&2
  exit 1
fi
exit "$rc"
