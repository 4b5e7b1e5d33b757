#!/usr/bin/env bash
# Run the test suite: ./scripts/test.sh [pytest args...]
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
set +e
python -m pytest "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "[test] pytest collected no tests: failing" >&2
  exit 1
fi
exit "$rc"
