#!/usr/bin/env bash
# ncu profiles: catalog seeds (default softmax) captured once each, then a short tune search's stored profiles
# Usage (from benchmarks/device.sh): profile [TASK ...]. Part 1, per task: compile the seed,
# capture_profile (forge_tui/evaluate/ncu.py: ncu over profile_child.py, one launch on the
# first timed shape), print the stored dict, profile_text, the time the capture took, and
# roofline_lines from an eager-only baseline. Part 2 (when PROFILE_SEARCH is not 0): a tune
# search of SEARCH_ITERS (default 6) on the first task with the torch.compile baseline off,
# then up to 60 s for the search's profiler to drain; prints each node's stored profile.
# Limits: PROFILE_S (default 200) for the whole script.
NCU=$(command -v ncu || ls -d /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1)
if [ -n "$NCU" ]; then  # the options and metrics ncu.py relies on, as this ncu names them
  "$NCU" --version | tail -1
  "$NCU" --help | grep -oE -- "--(print-units|profile-from-start|clock-control|log-file|target-processes|launch-count)" | sort -u | tr '\n' ' '; echo
  "$NCU" --query-metrics 2>&1 | grep -E "^(gpu__time_duration|dram__bytes |dram__throughput|sm__throughput|sm__warps_active|sm__maximum_warps|launch__(registers|shared_mem|block_size|grid_size)|lts__t_sector_hit_rate|smsp__average_warps_issue_stalled_(long|barrier|wait))" | cut -c1-110 | tee "$OUT/ncu_metrics.txt"
else
  echo "ncu: not found"
fi
timeout "${PROFILE_S:-200}" python3 - "${@:-softmax}" <<'EOF' 2>&1 | tee "$OUT/profile.txt"
import json, os, sys, time

from forge_tui.core.config import RunConfig
from forge_tui.evaluate.evaluator import Evaluator
from forge_tui.evaluate.ncu import capture_profile, find_ncu, ncu_version
from forge_tui.evaluate.profile import profile_text, roofline_lines
from forge_tui.llm.prompts import ROOFLINE_TITLE
from forge_tui.search.create import create_run
from forge_tui.search.runner import Search
from forge_tui.tasks.refs import task_ref
from forge_tui.tasks.catalog import catalog
from store import Store

tasks = sys.argv[1:]
ncu = find_ncu()
print("ncu:", ncu, ncu_version(ncu) if ncu else "")
for name in tasks:
    t = catalog()[name]
    ev = Evaluator(t, "cuda", task_ref=task_ref(t))
    facts = ev.start()
    compiled = ev.compile(t.seed_source("cuda"))
    print(f"== {name}: seed compiled ok={compiled.ok} cached={compiled.cached}", flush=True)
    t0 = time.monotonic()
    prof = capture_profile(compiled.library, task_ref(t), seed=1, timeout_s=100)
    print(f"capture took {time.monotonic() - t0:.1f} s")
    print(json.dumps(prof, indent=1))
    print(profile_text(prof) or "(profile_text: nothing)")
    base = ev.baseline_result(0, compile_baseline=False)
    eager = {s: b.eager.median_ms for s, b in base.shapes.items()}
    print(ROOFLINE_TITLE)
    print("\n".join(roofline_lines(t.spec_dict()["shapes"], eager, {}, facts.get("copy_gbs"))))
    ev.close()

if os.environ.get("PROFILE_SEARCH", "1") != "0":
    db = os.path.join(os.environ.get("OUT", "/tmp"), "profile.db")
    store = Store(db)
    run = create_run(store, RunConfig(task=tasks[0], backend="cuda", iterations=int(os.environ.get("SEARCH_ITERS", 6))))
    store.update_run(run.id, config_json=json.dumps({**run.config, "compile_baseline": False}))
    search = Search(store, run.id, log=lambda line: print(line, flush=True))
    t0 = time.monotonic()
    search.execute()
    print(f"search took {time.monotonic() - t0:.1f} s; profiler: {search._profiler!r}")
    if search._profiler is not None:
        print("profiler drained:", search._profiler.wait_idle(60), f"after {time.monotonic() - t0:.1f} s")
    best = None
    for n in store.nodes(run.id, with_source=False):
        p = n.profile
        print(f"node {n.id} {n.status:9} {n.speedup or 0:.3f}x profile {p.get('status', '-')}"
              f" {p.get('reason', '')} {json.dumps(p.get('metrics', {}))} {p.get('stalls', '')}")
        if p.get("status") == "ok" and (best is None or (n.speedup or 0) > (best.speedup or 0)):
            best = n
    if best is not None:
        print(f"-- profile_text of node {best.id}:\n{profile_text(best.profile)}")
    store.close()
EOF
exit "${PIPESTATUS[0]}"
