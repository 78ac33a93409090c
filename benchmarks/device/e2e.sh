#!/usr/bin/env bash
# a whole-model campaign (issue 15): e2e MODEL.py [optimize args...] -> capture, searches, export, apply four ways
# Runs `forge-tui optimize MODEL --backend cuda -o $OUT/e2e_<stem> ARGS` under E2E_S seconds
# (default 540; SIGTERM leaves the campaign resumable) and keeps its log in $OUT/e2e_<stem>.log.
M=$1; shift
stem=$(basename "$M" .py)
timeout -s TERM "${E2E_S:-540}" python3 -m forge_tui.cli optimize "$M" --backend cuda -o "$OUT/e2e_$stem" "$@" \
  > "$OUT/e2e_$stem.log" 2>&1
rc=$?
tail -60 "$OUT/e2e_$stem.log"
exit $rc
