#!/usr/bin/env bash
# the cuda adversarial corpus: every cheating kernel gets its expected verdict ($OUT/corpus.json)
C=$(ls tests/adversarial/run_cuda_corpus.py tests/*/adversarial/run_cuda_corpus.py 2>/dev/null | head -1)
[ -n "$C" ] || { echo "no run_cuda_corpus.py under tests/"; exit 2; }
timeout "${CORPUS_S:-150}" python3 "$C" --json "$OUT/corpus.json" "$@"
