#!/usr/bin/env bash
# from a model to kernels in it: capture -> tune search from examples/seeds -> export -> apply (model_loop.py; args pass on)
# ResNet-50 (its global average pool) and the transformer block (its softmax) by default;
# `model_loop --models block` for one. LOOP_S (default 480) budgets the whole loop.
# Writes $OUT/model_loop{,.md,.json} and model_loop.db.gz.
LOOP_S=${LOOP_S:-480}
W=/tmp/forge-model-loop-$$
timeout -s TERM $(( LOOP_S + 40 )) python3 benchmarks/model_loop.py --backend cuda --out "$OUT/model_loop" \
  --work "$W" --deadline-s "$LOOP_S" --machine "nvidia-smi: $MACHINE" "$@"
rc=$?
cp "$OUT/model_loop/model_loop.md" "$OUT/model_loop/model_loop.json" "$OUT/" 2>/dev/null
[ -f "$W/forge.db" ] && db_gz "$W/forge.db" "$OUT/model_loop.db.gz"
exit $rc
