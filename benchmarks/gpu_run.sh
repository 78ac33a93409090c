#!/usr/bin/env bash
# On a GPU machine without our Python deps: install carried wheels, then run the given
# forge-tui commands. Usage: benchmarks/gpu_run.sh "<forge-tui args>" ["<forge-tui args>" ...]
# Writes the database and logs under $OUT (or ./gpu-out).
set -uo pipefail
. "$(dirname "$0")/gpu_env.sh"
export FORGE_DB=$OUT/forge.db
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda, torch.cuda.get_device_name())"
for a in "$@"; do
  echo "=== forge-tui $a"
  # shellcheck disable=SC2086
  python3 -m forge_tui.cli $a 2>&1 | tee -a "$OUT/log.txt"
done
