#!/usr/bin/env bash
# Second short device call: the transformer block's model loop (GPU 0) and the cuda
# adversarial corpus after the timer change (GPU 1). Writes under $OUT.
set -uo pipefail
. "$(dirname "$0")/gpu_env.sh"
M="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1), $(nproc) CPU cores"
NGPU=$(nvidia-smi -L | wc -l); G1=$(( NGPU > 1 ? 1 : 0 ))
( CUDA_VISIBLE_DEVICES=0 timeout -s TERM ${LOOP_S:-200} python3 benchmarks/model_loop.py --backend cuda --models block \
    --out /tmp/ml --work /tmp/forge-model-loop --deadline-s $(( ${LOOP_S:-200} - 20 )) --machine "nvidia-smi: $M"
  cp /tmp/ml/model_loop.md "$OUT/model_loop_block.md"; cp /tmp/ml/model_loop.json "$OUT/model_loop_block.json" ) > "$OUT/lane0.log" 2>&1 &
( CUDA_VISIBLE_DEVICES=$G1 timeout 150 python3 tests/adversarial/run_cuda_corpus.py --json "$OUT/corpus.json" ) > "$OUT/corpus.txt" 2>&1 &
wait
cat "$OUT/corpus.txt"; tail -30 "$OUT/lane0.log"
