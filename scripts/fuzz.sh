#!/usr/bin/env bash
# The long, bounded run of the fuzzers (tests/fuzz): N random inputs per entry point.
#
#   ./scripts/fuzz.sh            # 100000 inputs each (a few hours on 2 cores)
#   ./scripts/fuzz.sh 20000      # fewer
#   ./scripts/fuzz.sh 5000 -k codec   # one file's entry points (more pytest arguments)
#
# Prints, per entry point, the inputs tried and the time taken (hypothesis statistics);
# a failure prints the input that reproduces it. CI runs the same tests with a small,
# fixed set of inputs (TPJ_FUZZ_EXAMPLES unset).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
N="${1:-100000}"
shift || true
export TPJ_FUZZ_EXAMPLES="$N"
exec "$VENV/bin/python" -m pytest -q -p no:randomly -p no:cacheprovider --timeout=0 \
  --hypothesis-show-statistics --durations=0 tests/fuzz "$@"
