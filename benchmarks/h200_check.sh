#!/usr/bin/env bash
# One device call over two GPUs (one lane each; works on one GPU, lanes then share it):
#   lane 0: every catalog seed on cuda (seed_table.py), the cuda adversarial corpus, then
#           tune searches SEARCHES0;
#   lane 1: sweep.py grids (SWEEPS, ';'-separated "TASK NAME=v1,v2 ..."), the timing
#           agreement and 10-evaluation CV (timing_agreement.py CV_TASKS), then SEARCHES1.
# Usage: SWEEPS=... CV_TASKS=... benchmarks/h200_check.sh "TASK:ITERS ..." "TASK:ITERS ..."
# Writes $OUT/{lane0,lane1}.log, report.md, forge.db.gz.
set -uo pipefail
. "$(dirname "$0")/gpu_env.sh"
export FORGE_DB=/tmp/forge.db
NGPU=$(nvidia-smi -L | wc -l); G1=$(( NGPU > 1 ? 1 : 0 ))
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
python3 -m forge_tui.cli ls >/dev/null  # create the database before the lanes race to
search() {  # TASK:ITERS ...
  for spec in $1; do
    echo "== tune search ${spec%%:*} x ${spec##*:}"
    timeout -s TERM ${SEARCH_S:-110} python3 -m forge_tui.cli run "${spec%%:*}" --backend cuda \
      --iterations "${spec##*:}" --headless 2>&1 | tail -4
  done
}
(
  export CUDA_VISIBLE_DEVICES=0
  echo "== seeds on cuda"; timeout 170 python3 benchmarks/seed_table.py --backend cuda
  echo "== adversarial corpus on cuda"
  timeout 140 python3 tests/adversarial/run_cuda_corpus.py --json "$OUT/corpus.json"
  search "${1:-}"
) > "$OUT/lane0.log" 2>&1 &
(
  export CUDA_VISIBLE_DEVICES=$G1
  IFS=';' read -ra GRIDS <<< "${SWEEPS:-}"
  for g in "${GRIDS[@]}"; do
    echo "== sweep $g"; timeout ${SWEEP_S:-130} python3 benchmarks/sweep.py $g --backend cuda
  done
  if [ -n "${CV_TASKS:-}" ]; then
    echo "== timing agreement and CV"; timeout 150 python3 benchmarks/timing_agreement.py $CV_TASKS --repeat 10
  fi
  search "${2:-}"
) > "$OUT/lane1.log" 2>&1 &
wait
cat "$OUT/lane0.log" "$OUT/lane1.log"
python3 -m forge_tui.cli ls
python3 benchmarks/report.py /tmp/forge.db > "$OUT/report.md" 2>&1
gzip -c /tmp/forge.db > "$OUT/forge.db.gz"
