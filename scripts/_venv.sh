# Sourced by the scripts: create or reuse .venv and install the project into it.
# Reinstalls only when the build inputs (pyproject.toml, setup.py and the optional C
# extension's source) changed since the last install.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${TENSORPLAY_JAX_VENV:-$ROOT/.venv}"
PY="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup] creating virtual environment in $VENV" >&2
  "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
fi
STAMP="$VENV/.tensorplay-jax-stamp"
WANT="$(cat "$ROOT/pyproject.toml" "$ROOT/setup.py" "$ROOT/tensorplay_jax/rpc/_spin.c" | sha256sum | cut -d' ' -f1)-${EXTRAS:-test}"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
  echo "[setup] installing tensorplay-jax[${EXTRAS:-test}] (first run takes about a minute)" >&2
  if ! "$VENV/bin/python" -m pip install -q -e "$ROOT[${EXTRAS:-test}]" >"$VENV/.install.log" 2>&1; then
    cat "$VENV/.install.log" >&2
    echo "[setup] pip install failed (log above)" >&2
    exit 1
  fi
  echo "$WANT" > "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
cd "$ROOT"
