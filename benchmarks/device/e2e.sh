#!/usr/bin/env bash
# a whole-model campaign: e2e MODEL.py [optimize args...] -> capture, searches, export, apply four ways
# Runs `forge-tui optimize MODEL --backend cuda -o $E2E_DIR/e2e_<stem> ARGS` under E2E_S seconds
# (default 540; SIGTERM leaves the campaign resumable). The campaign directory (tasks, exported
# kernels) stays on the machine (E2E_DIR, default /tmp: the device returns a limited number of
# files); its log and campaign.json come back as $OUT/e2e_<stem>.log and e2e_<stem>.campaign.json.
M=$1; shift
stem=$(basename "$M" .py)
dir="${E2E_DIR:-/tmp}/e2e_$stem"
timeout -s TERM "${E2E_S:-540}" python3 -m forge_tui.cli optimize "$M" --backend cuda -o "$dir" "$@" \
  > "$OUT/e2e_$stem.log" 2>&1
rc=$?
cp "$dir/campaign.json" "$OUT/e2e_$stem.campaign.json" 2>/dev/null
tail -60 "$OUT/e2e_$stem.log"
exit $rc
