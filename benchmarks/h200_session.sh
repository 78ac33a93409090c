#!/usr/bin/env bash
# One device call: every catalog seed on cuda, the cuda adversarial corpus, and tune searches.
# Usage: benchmarks/h200_session.sh "TASK:ITERS TASK:ITERS ..."   (writes under $OUT)
set -uo pipefail
. "$(dirname "$0")/gpu_env.sh"
export FORGE_DB=$OUT/forge.db
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
echo "== seeds on cuda"
python3 benchmarks/seed_table.py --backend cuda 2>&1 | tee "$OUT/seeds.txt"
if [ -f tests/adversarial/run_cuda_corpus.py ]; then
  echo "== adversarial corpus on cuda"
  timeout 140 python3 tests/adversarial/run_cuda_corpus.py --json "$OUT/corpus.json" 2>&1 | tee "$OUT/corpus.txt"
fi
for spec in $1; do
  task=${spec%%:*}; it=${spec##*:}
  echo "== tune search $task x $it"
  timeout 165 python3 -m forge_tui.cli run "$task" --backend cuda --iterations "$it" --headless 2>&1 | tail -8
done
python3 benchmarks/report.py "$OUT/forge.db" > "$OUT/report.md" 2>&1; cat "$OUT/report.md"
