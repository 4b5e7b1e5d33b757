#!/usr/bin/env bash
# Simulated hosts on this machine (network namespaces, needs root):
#   ./scripts/cluster.sh up [N]     create N hosts (default 2) and print how to enter each
#   ./scripts/cluster.sh down NAME  remove them
#   ./scripts/cluster.sh reap       remove clusters left by processes that died
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
case "${1:-}" in
  up) exec python -m tensorplay_jax.testing.netns up --hosts "${2:-2}" ;;
  down | reap) exec python -m tensorplay_jax.testing.netns "$@" ;;
  *) sed -n '2,5p' "$0" >&2; exit 2 ;;
esac
