#!/usr/bin/env bash
# Tune searches spread over the GPUs of one machine: one queue per GPU, one search at a time
# per GPU (each worker also takes that GPU's timing lock). Usage:
#   benchmarks/h200_searches.sh SECONDS_PER_SEARCH "TASK:ITERS TASK:ITERS ..." ["RUN_ID ..." to resume]
# Writes $OUT/forge.db.gz, $OUT/report.md and one log per queue. A search cut by its time
# limit gets SIGTERM, ends `interrupted`, and resumes in a later call (.gpu-in/forge.db).
set -uo pipefail
LIMIT=$1; SPECS=$2; RESUME=${3:-}
. "$(dirname "$0")/gpu_env.sh"
export FORGE_DB=/tmp/forge.db
[ -f .gpu-in/forge.db ] && cp .gpu-in/forge.db /tmp/forge.db
NGPU=$(nvidia-smi -L | wc -l)
python3 -m forge_tui.cli ls >/dev/null  # create the database before the queues race to
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
declare -a Q
i=0
for r in $RESUME; do Q[$((i % NGPU))]+="resume:$r "; i=$((i + 1)); done
for s in $SPECS; do Q[$((i % NGPU))]+="$s "; i=$((i + 1)); done
for g in $(seq 0 $((NGPU - 1))); do
  (
    for item in ${Q[$g]:-}; do
      if [[ $item == resume:* ]]; then
        echo "== GPU $g: resume ${item#resume:}"
        CUDA_VISIBLE_DEVICES=$g timeout -s TERM "$LIMIT" python3 -m forge_tui.cli resume "${item#resume:}" --headless 2>&1 | tail -4
      else
        echo "== GPU $g: tune search ${item%%:*} x ${item##*:}"
        CUDA_VISIBLE_DEVICES=$g timeout -s TERM "$LIMIT" python3 -m forge_tui.cli run "${item%%:*}" --backend cuda \
          --iterations "${item##*:}" --headless 2>&1 | tail -4
      fi
    done
  ) > "$OUT/queue$g.log" 2>&1 &
done
wait
cat "$OUT"/queue*.log
python3 -m forge_tui.cli ls
python3 benchmarks/report.py /tmp/forge.db > "$OUT/report.md" 2>&1
gzip -c /tmp/forge.db > "$OUT/forge.db.gz"
