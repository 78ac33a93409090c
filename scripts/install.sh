#!/usr/bin/env bash
# Set up forge-tui in ./.venv: keeps a torch that is already installed (NGC containers, DGX OS:
# the venv sees system site-packages), else installs torch 2.13.0; then the package itself
# with its test extras. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv --system-site-packages .venv
fi
if ! .venv/bin/python -c "import torch" >/dev/null 2>&1; then
  .venv/bin/python -m pip install -q "torch==2.13.0"
fi
.venv/bin/python -m pip install -q -e ".[dev]"
