#!/usr/bin/env bash
# Run the main demo: ./scripts/demo.sh [demo args...]
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
exec python -m tensorplay_jax.demo "$@"
