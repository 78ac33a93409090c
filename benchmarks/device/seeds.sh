#!/usr/bin/env bash
# every catalog seed (or the TASKS given) evaluated once on cuda: status, speedup, GB/s (seed_table.py)
timeout "${SEEDS_S:-170}" python3 benchmarks/seed_table.py --backend cuda "$@" 2>&1 | tee "$OUT/seeds${CUDA_VISIBLE_DEVICES:-}.txt"
exit "${PIPESTATUS[0]}"
