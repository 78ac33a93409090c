#!/usr/bin/env bash
# Issue 7 on the GPU, in one device call (about 8 minutes on one H200): for ResNet-50
# (batch 32; its global average pool is aten.mean.dim over [-1, -2]) and the transformer block
# (FORGE_BLOCK_SIZE=large; its aten._softmax.default): capture -> tune search from
# examples/seeds/*.cu (30 iterations, each search under a time limit: SIGTERM, ends
# interrupted, its best node is exported anyway) -> export -> apply.
# Usage (repo root, .whl carried): benchmarks/h200_model_loop.sh [extra args for benchmarks/model_loop.py]
# Writes $OUT/model_loop.md, model_loop.json, model_loop.log and forge.db.gz.
set -uo pipefail
. "$(dirname "$0")/gpu_env.sh"
MACHINE="$(nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader | head -1), $(nproc) CPU cores"
echo "$MACHINE"
python3 benchmarks/model_loop.py --backend cuda --out "$OUT" --work /tmp/forge-model-loop --machine "nvidia-smi: $MACHINE" "$@"
rc=$?
# one self-contained copy of the database (WAL folded in), gzipped
python3 -c "import sqlite3; s = sqlite3.connect('/tmp/forge-model-loop/forge.db'); d = sqlite3.connect('/tmp/forge-model-loop/copy.db'); s.backup(d); d.close()" \
  && gzip -c /tmp/forge-model-loop/copy.db > "$OUT/forge.db.gz"
exit $rc
