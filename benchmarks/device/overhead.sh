#!/usr/bin/env bash
# the harness's own overhead and candidates per minute on cuda, sequential and --parallel N (overhead.py)
timeout -s TERM "${OVERHEAD_S:-200}" python3 benchmarks/overhead.py --backend cuda "$@"
