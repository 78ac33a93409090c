#!/usr/bin/env bash
# tune searches on cuda, one after the other: TASK:ITERS ... (resume:RUN_ID continues a run), each under SEARCH_S
# A search cut by its limit gets SIGTERM and ends `interrupted`: pass the database back as
# .gpu-in/forge.db and `resume:RUN_ID` continues it in a later call. TASK may be a task file.
for item in "$@"; do
  if [[ $item == resume:* ]]; then
    echo "-- resume ${item#resume:}"
    timeout -s TERM "${SEARCH_S:-165}" python3 -m forge_tui.cli resume "${item#resume:}" --headless 2>&1 | tail -6
  else
    echo "-- tune search ${item%%:*} x ${item##*:}"
    timeout -s TERM "${SEARCH_S:-165}" python3 -m forge_tui.cli run "${item%%:*}" --backend cuda \
      --iterations "${item##*:}" --headless 2>&1 | tail -6
  fi
done
