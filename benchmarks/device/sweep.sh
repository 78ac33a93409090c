#!/usr/bin/env bash
# a grid of @tune settings of one seed on cuda: sweep TASK NAME=v1,v2 ... (sweep.py), under SWEEP_S
timeout "${SWEEP_S:-130}" python3 benchmarks/sweep.py "$@" --backend cuda
