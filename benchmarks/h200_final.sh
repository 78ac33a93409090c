#!/usr/bin/env bash
# One device call on a 2-GPU H200 machine: lane 0 runs the model loop (issue 7), lane 1 the
# scripted-LLM CUDA demo (issue 3), the do_bench agreement and the overhead benchmark
# (issue 6). Writes at most 8 files under $OUT.
set -uo pipefail
. "$(dirname "$0")/gpu_env.sh"
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
NGPU=$(nvidia-smi -L | wc -l); G1=$(( NGPU > 1 ? 1 : 0 ))
M="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1), $(nproc) CPU cores"
(
  CUDA_VISIBLE_DEVICES=0 timeout -s TERM 520 python3 benchmarks/model_loop.py --backend cuda --out /tmp/ml \
    --work /tmp/forge-model-loop --deadline-s ${LOOP_S:-480} --machine "nvidia-smi: $M"
  cp /tmp/ml/model_loop.md /tmp/ml/model_loop.json "$OUT/" 2>/dev/null
  gzip -c /tmp/forge-model-loop/forge.db > "$OUT/model_loop.db.gz" 2>/dev/null
) > "$OUT/lane0.log" 2>&1 &
(
  export CUDA_VISIBLE_DEVICES=$G1
  echo "== llm demo"; timeout -s TERM 200 python3 benchmarks/h200_llm_demo.py --backend cuda --out /tmp/llm --timeout 170
  cp /tmp/llm/llm_demo.md "$OUT/" 2>/dev/null
  echo "== timing agreement"; timeout 100 python3 benchmarks/timing_agreement.py softmax rms_norm_bf16 adaptive_avg_pool2d --repeat 2
  echo "== overhead"; timeout -s TERM 200 python3 benchmarks/overhead.py --task softmax --backend cuda --iterations 10 --parallel 1 4
) > "$OUT/lane1.log" 2>&1 &
wait
cat "$OUT/lane1.log"; tail -40 "$OUT/lane0.log"
