#!/usr/bin/env bash
# On a GPU machine: a short cuda tune search on softmax and one on a task file seeded with
# --seed-kernel, export both (one with --build), check the exported modules on the GPU.
# Usage: benchmarks/export/h200_export.sh  (wheels from .whl are installed when present)
set -uo pipefail
. "$(dirname "$0")/../gpu_env.sh"
export FORGE_DB=$OUT/export.db
F="python3 -m forge_tui.cli"
run_id() { sed -n 's/^run \([0-9]*\)$/\1/p' | head -1; }
A=$($F run softmax --backend cuda --proposer tune --iterations 2 --headless | tee "$OUT/softmax.log" | run_id)
B=$($F run benchmarks/export/swish_bias.py --backend cuda --proposer tune --iterations 2 --headless \
      --seed-kernel benchmarks/export/swish_bias_seed.cu | tee "$OUT/swish.log" | run_id)
[ -n "$A" ] && [ -n "$B" ] || { echo "a search failed"; tail -5 "$OUT"/*.log; exit 1; }
$F export "$A" -o /tmp/exp_softmax --build && $F export "$B" -o /tmp/exp_swish || exit 1
cp /tmp/exp_softmax/forge_kernel.py "$OUT/softmax_forge_kernel.py"; cp /tmp/exp_swish/forge_kernel.py "$OUT/swish_forge_kernel.py"
# a fresh interpreter without our package on the path: what a user's model code sees
env -u PYTHONPATH python3 benchmarks/export/check.py /tmp/exp_softmax /tmp/exp_swish
