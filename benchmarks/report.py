"""Summarise finished runs of a forge-tui database as Markdown for docs/benchmarks.md.

Usage: python benchmarks/report.py DB [--append docs/benchmarks.md] [--title TEXT]
For each run: the device, eager and torch.compile baselines per shape, the best node
(confirmed speedup where the run confirmed it), its per-shape time, achieved GB/s and %
of the measured copy bandwidth, the wall time and candidates per minute.
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from pathlib import Path

from store import Store


def run_section(store: Store, run) -> str:
    dev = json.loads(run.device_json or "{}")
    base = json.loads(run.baseline_json or "{}")
    nodes = store.nodes(run.id, with_source=False)
    best = next((n for n in nodes if n.id == run.best_node_id), None)
    finished = [n for n in nodes if n.finished_at]
    t0 = datetime.fromisoformat(min(n.created_at for n in nodes)) if nodes else None
    t1 = datetime.fromisoformat(max(n.finished_at for n in finished)) if finished else None
    wall = (t1 - t0).total_seconds() if t0 and t1 else 0.0
    per_min = 60.0 * len(finished) / wall if wall else 0.0
    lines = [
        f"### {run.task_name}: run {run.id} ({run.proposer}, {run.iterations_done} iterations, {run.status})",
        "",
        f"Device: {dev.get('gpu') or dev.get('cpu')} ({run.backend}, {dev.get('arch') or ''}), torch {dev.get('torch')}, "
        f"driver {dev.get('driver', '-')}, measured copy bandwidth {dev.get('copy_gbs')} GB/s. "
        f"Wall time {wall:.0f} s for {len(finished)} nodes ({per_min:.1f} candidates/min).",
        "",
    ]
    if best is None:
        return "\n".join(lines + ["No node beat zero.", ""])
    shapes = json.loads(best.shapes_json or "{}")
    conf = f", confirmed {best.confirmed_speedup:.3f}x" if best.confirmed_speedup else ""
    lines += [
        f"Best node {best.id} ({best.description}): {best.speedup or 0:.3f}x over eager at search time{conf}"
        + (f", {best.speedup_compile:.3f}x over torch.compile" if best.speedup_compile else "")
        + ".",
        "",
        "| shape | eager us | torch.compile us | best us | speedup vs eager | GB/s | % of copy BW | CV |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for shape, v in shapes.items():
        eager = (base.get("eager") or {}).get(shape)
        comp = (base.get("compile") or {}).get(shape)
        lines.append(
            f"| {shape} | {eager * 1e3:.1f} | {comp * 1e3 if comp else float('nan'):.1f} | "
            f"{v['median_ms'] * 1e3:.1f} | {v['speedup']:.2f}x | {v['gbps']:.0f} | "
            f"{v['sol_pct'] or 0:.0f}% | {100 * v['cv']:.1f}% |"
        )
    return "\n".join(lines + [""])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("db")
    ap.add_argument("--append", type=Path)
    ap.add_argument("--title", default="")
    a = ap.parse_args()
    store = Store(a.db, readonly=True)
    text = (f"## {a.title}\n\n" if a.title else "") + "\n".join(
        run_section(store, r) for r in reversed(store.list_runs())
    )
    if a.append:
        with a.append.open("a") as f:
            f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
