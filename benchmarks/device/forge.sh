#!/usr/bin/env bash
# any forge-tui command on the device: forge ARGS... (e.g. forge run softmax --backend cuda --headless), logged to $OUT/forge.log
echo "-- forge-tui $*" >> "$OUT/forge.log"
python3 -m forge_tui.cli "$@" 2>&1 | tee -a "$OUT/forge.log"
exit "${PIPESTATUS[0]}"
