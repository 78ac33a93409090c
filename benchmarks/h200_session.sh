#!/usr/bin/env bash
# One device call: every catalog seed on cuda, the cuda adversarial corpus, and tune searches.
# Usage: benchmarks/h200_session.sh "TASK:ITERS TASK:ITERS ..."   (writes under $OUT)
set -uo pipefail
. "$(dirname "$0")/gpu_env.sh"
export FORGE_DB=$OUT/forge.db
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
echo "== seeds on cuda"
python3 - <<'PY' 2>&1 | tee "$OUT/seeds.txt"
import time
from forge_tui.evaluate.evaluator import Evaluator
from forge_tui.search.runner import task_ref
from kernels.registry import catalog
for name, t in catalog().items():
    ev = Evaluator(t, "cuda", task_ref=task_ref(t)); ev.start()
    t0 = time.perf_counter(); r = ev.evaluate(t.seed_source("cuda"), seed=3); dt = time.perf_counter() - t0
    per = "  ".join(f"{s} {v['median_ms']*1e3:.1f}us eager {v['baseline_ms']*1e3:.1f}us {v['speedup']:.2f}x {v['gbps']:.0f}GB/s {v['sol_pct'] or 0:.0f}%" for s, v in r.shapes.items())
    print(f"{name:22} {r.status:8} {r.speedup or 0:.3f}x  {per}  [{dt:.1f}s] {r.error[:200]}", flush=True)
    ev.close()
PY
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
