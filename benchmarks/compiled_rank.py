"""How ``optimize`` ranks a model's fusion regions: by eager share, and by what the compiled forward
leaves in them (``--rank compiled``).

    python3 benchmarks/compiled_rank.py MODEL.py [--backend auto|cuda|host]

Captures the model's regions and times them (as ``capture --regions``), profiles its compiled
forward (``capture --compiled``) and prints one line per region: its eager share, the compiled
kernels attributed to it (``forge_tui.model.capture.compiled.region_left``) with their time and
what is left above their copy floor, and its rank both ways.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--backend", default="auto")
    a = ap.parse_args(argv)
    from forge_tui.campaign.plan import ranked_by_left
    from forge_tui.model import capture as cp
    from forge_tui.model.capture.compiled import compiled_table, region_left
    from forge_tui.model.capture.region_find import find_regions
    from forge_tui.model.capture.regions import set_times

    cap = cp.record(a.model, backend=a.backend)
    rs = find_regions(cap)
    cp.measure(cap)
    set_times(rs)
    eager = rs.ranked()
    table = compiled_table(a.model, backend=a.backend, samples=0)
    left = region_left(table, {r.id: list(r.ops) for r in eager})
    compiled = ranked_by_left(eager, {rid: v.left_us for rid, v in left.items()})
    pos = {r.id: i + 1 for i, r in enumerate(compiled)}
    b = table.budget()
    print(
        f"{cap.model_file.path.name} on {cap.device_name}: {len(eager)} regions; compiled kernels {b['kernels_us']:.1f} us, glue {b['glue_us']:.1f} us"
    )
    print(
        f"{'eager#':>6} {'compiled#':>9} {'region':>6} {'pattern':22} {'share':>6} {'compiled us':>11} {'left us':>8}  kernels"
    )
    for i, r in enumerate(eager, 1):
        v = left.get(r.id)
        share = "-" if r.share is None else f"{100 * r.share:.1f}%"
        cu, lu = ("-", "-") if v is None else (f"{v.compiled_us:.1f}", f"{v.left_us:.1f}")
        ks = "" if v is None else ", ".join(v.kernels)
        print(
            f"{i:>6} {pos[r.id]:>9} {r.id:>6} {(r.pattern_name or '-')[:22]:22} {share:>6} {cu:>11} {lu:>8}  {ks[:160]}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
