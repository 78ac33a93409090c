#!/usr/bin/env bash
# timing agreement with do_bench and the CV of repeated evaluations: timing [TASKS...] [--repeat N] (timing_agreement.py)
timeout "${TIMING_S:-150}" python3 benchmarks/timing_agreement.py --backend cuda "$@"
