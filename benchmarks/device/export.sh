#!/usr/bin/env bash
# export on cuda: tune searches on softmax and on a task file with --seed-kernel, export both (one --build), check them
# The check (benchmarks/export/check.py) runs in a fresh interpreter without our package on
# the path, as a user's model code would: accuracy, torch.compile(fullgraph=True), CUDA graphs.
export FORGE_DB=$OUT/export.db
F="python3 -m forge_tui.cli"
run_id() { sed -n 's/^run \([0-9]*\)$/\1/p' | head -1; }
A=$($F run softmax --backend cuda --proposer tune --iterations 2 --headless | tee "$OUT/export_softmax.log" | run_id)
B=$($F run benchmarks/export/swish_bias.py --backend cuda --proposer tune --iterations 2 --headless \
      --seed-kernel benchmarks/export/swish_bias_seed.cu | tee "$OUT/export_swish.log" | run_id)
[ -n "$A" ] && [ -n "$B" ] || { echo "a search failed"; tail -5 "$OUT"/export_*.log; exit 1; }
$F export "$A" -o /tmp/exp_softmax --build --force && $F export "$B" -o /tmp/exp_swish --force || exit 1
cp /tmp/exp_softmax/forge_kernel.py "$OUT/softmax_forge_kernel.py"; cp /tmp/exp_swish/forge_kernel.py "$OUT/swish_forge_kernel.py"
env -u PYTHONPATH python3 benchmarks/export/check.py /tmp/exp_softmax /tmp/exp_swish
