#!/usr/bin/env bash
# The one device runner: runs named benchmarks on a GPU machine, in lanes (one lane per GPU).
#
#   benchmarks/device.sh 'NAME [ARGS...]; NAME [ARGS...]' ['NAME [ARGS...]; ...' ...]
#   benchmarks/device.sh --list
#
# Each argument is a lane: its benchmarks run one after the other, on GPU (lane number mod
# the GPUs present), while the other lanes run at the same time on theirs (on one GPU the
# lanes share it). NAME is a script in benchmarks/device/ (`--list` prints them with their
# first comment line), else a Python script benchmarks/NAME.py run with ARGS. Examples:
#
#   benchmarks/device.sh 'seeds; corpus; searches softmax:50' \
#                        'sweep softmax BLOCK=256,512 COOP_OCC=1,2,4; timing softmax layer_norm --repeat 10'
#   benchmarks/device.sh 'model_loop' 'llm_demo; timing --repeat 2; overhead --iterations 10 --parallel 1 4'
#   benchmarks/device.sh 'searches softmax:50 gelu:50' 'searches layer_norm:50 resume:7'
#   benchmarks/device.sh 'forge run softmax --backend cuda --iterations 20 --headless'
#   benchmarks/device.sh 'export'   'copy_at_size'
#
# Run from the repository root. Environment: OUT (default ./gpu-out) receives everything;
# FORGE_DB (default /tmp/forge.db; .gpu-in/forge.db is copied there first when present, to
# resume runs from an earlier call) is the database the searches share; FORGE_CACHE
# (default /tmp/forge-cache) the build cache; carried wheels in .whl/ are installed into
# /tmp/site first. Each benchmark's own time limit is in its script (SEARCH_S, SWEEP_S,
# LOOP_S ... override them). Writes $OUT/lane<N>.log (printed at the end), and when the
# database has runs, $OUT/report.md (benchmarks/report.py) and $OUT/forge.db.gz.
set -uo pipefail
cd "$(dirname "$0")/.."
HERE=benchmarks/device

if [ "${1:-}" = "--list" ] || [ $# -eq 0 ]; then
  [ $# -eq 0 ] && sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  echo "named benchmarks (benchmarks/device/NAME.sh):"
  for f in "$HERE"/*.sh; do
    n=$(basename "$f" .sh); [ "$n" = env ] && continue
    printf '  %-12s %s\n' "$n" "$(sed -n '2s/^# //p' "$f")"
  done
  echo "and any benchmarks/NAME.py, run as python3 benchmarks/NAME.py ARGS"
  [ $# -eq 0 ] && exit 2 || exit 0
fi

. "$HERE/env.sh"
export FORGE_DB=${FORGE_DB:-/tmp/forge.db}
[ -f .gpu-in/forge.db ] && [ ! -f "$FORGE_DB" ] && cp .gpu-in/forge.db "$FORGE_DB"
# create the database (its tables) before the lanes race to
python3 -c "import sys; from store import Store; Store(sys.argv[1])" "$FORGE_DB" || echo "could not create $FORGE_DB"

# one benchmark: NAME ARGS... (word-split as a shell would, quotes included)
bench() {
  local name=$1; shift
  echo "== $name $*  [GPU ${CUDA_VISIBLE_DEVICES:-all}, $(date -u +%H:%M:%S)]"
  if [ -f "$HERE/$name.sh" ] && [ "$name" != env ]; then
    bash "$HERE/$name.sh" "$@"
  elif [ -f "benchmarks/$name.py" ]; then
    python3 "benchmarks/$name.py" "$@"
  else
    echo "no benchmark named '$name' (benchmarks/device.sh --list)"; return 2
  fi
  local rc=$?; [ $rc -ne 0 ] && echo "== $name exited $rc"
  return 0
}

lane=0
for spec in "$@"; do
  (
    export CUDA_VISIBLE_DEVICES=$(( lane % NGPU ))
    IFS=';' read -ra ITEMS <<< "$spec"
    for item in "${ITEMS[@]}"; do
      eval "words=($item)"
      [ ${#words[@]} -gt 0 ] && bench "${words[@]}"
    done
  ) > "$OUT/lane$lane.log" 2>&1 &
  lane=$(( lane + 1 ))
done
wait
for ((i = 0; i < lane; i++)); do echo "######## lane $i"; cat "$OUT/lane$i.log"; done

if [ -n "$(python3 -m forge_tui.cli ls --json 2>/dev/null | tr -d '[:space:][]')" ]; then
  python3 -m forge_tui.cli ls
  python3 benchmarks/report.py "$FORGE_DB" > "$OUT/report.md" 2>&1
  db_gz "$FORGE_DB" "$OUT/forge.db.gz"
fi
