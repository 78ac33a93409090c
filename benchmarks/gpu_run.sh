#!/usr/bin/env bash
# On a GPU machine without our Python deps: install carried wheels, then run the given
# forge-tui commands. Usage: benchmarks/gpu_run.sh "<forge-tui args>" ["<forge-tui args>" ...]
# Writes the database and logs under $OUT (or ./gpu-out).
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1 \
    || { echo "wheel install failed"; exit 1; }
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1 FORGE_DB=$OUT/forge.db FORGE_CACHE=/tmp/forge-cache
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda, torch.cuda.get_device_name())"
for a in "$@"; do
  echo "=== forge-tui $a"
  # shellcheck disable=SC2086
  python3 -m forge_tui.cli $a 2>&1 | tee -a "$OUT/log.txt"
done
