#!/usr/bin/env bash
# an LLM search on cuda against a scripted OpenAI-compatible server (h200_llm_demo.py): every reply ends as scripted
timeout -s TERM "${LLM_DEMO_S:-200}" python3 benchmarks/h200_llm_demo.py --backend cuda --out "$OUT/llm_demo" \
  --timeout $(( ${LLM_DEMO_S:-200} - 30 )) "$@"
rc=$?
cp "$OUT/llm_demo/llm_demo.md" "$OUT/" 2>/dev/null
exit $rc
