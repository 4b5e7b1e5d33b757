#!/usr/bin/env bash
# Build the documentation site: ./scripts/docs.sh [sphinx-build args...]
# Output: docs/_build/html (open docs/_build/html/index.html). Warnings are errors.
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
exec python -m sphinx -b html -W --keep-going -q docs docs/_build/html "$@"
