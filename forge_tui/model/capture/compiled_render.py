"""The text of ``forge-tui capture MODEL.py --compiled``: the compiled forward's kernel table,
then its glue budget and the GEMMs' roofline share (:mod:`forge_tui.model.capture.compiled`)."""

from __future__ import annotations

import textwrap
from typing import Optional

from forge_tui.model.capture.compiled import CompiledTable
from forge_tui.model.capture.render import short_text

#: Rows shown before the rest are summed into one line (``--json`` always has them all).
MAX_ROWS = 40
#: The columns before the kernel's name: #, kind, us, share, calls, floor us, of floor.
_LEAD = 58


def _us(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:,.1f}"


def _pct(x: Optional[float]) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def format_compiled(t: CompiledTable, columns: Optional[int] = None, max_rows: int = MAX_ROWS) -> str:
    """The kernel table (largest first, at most ``max_rows`` rows, then one line for the rest)
    and the budget lines. ``columns``: the terminal's width, to cut kernel names and wrap prose
    to it (None: names whole)."""
    b = t.budget()
    how = {"cuda_graph": "CUDA graph replay"}.get(t.method, t.method)
    built = "" if t.build_s is None else f"; compiled in {t.build_s:.1f} s"
    prose = [
        f"{t.model}: torch.compile (Inductor, default mode) forward on {t.device_name} ({t.backend}, {how}; "
        f"{t.forwards} forwards profiled{built})"
    ]
    fwd = ""
    if t.forward_us is not None:
        fwd = f"forward {_us(t.forward_us)} us (p10 {_us(t.forward_p10_us)}, p90 {_us(t.forward_p90_us)}); "
    prose.append(f"{fwd}kernels {_us(b['kernels_us'])} us in {len(t.kernels)} distinct kernels")
    name_w = None if columns is None else max(16, columns - 1 - _LEAD)
    table = [f"{'#':>3}  {'kind':9} {'us':>9} {'share':>6} {'calls':>5} {'floor us':>9} {'of floor':>8}  kernel"]
    for i, k in enumerate(t.kernels[:max_rows], 1):
        of = "-" if k.floor_us is None or k.us <= 0 else f"{100 * k.floor_us / k.us:.0f}%"
        floor = "n/a" if k.kind.value in ("fused", "copy", "other") and k.floor_us is None else _us(k.floor_us)
        name = k.name if name_w is None else short_text(k.name, name_w)
        table.append(
            f"{i:>3}  {k.kind.value:9} {k.us:9.1f} {_pct(k.share):>6} {k.calls:5.0f} {floor:>9} {of:>8}  {name}"
        )
    rest = t.kernels[max_rows:]
    if rest:
        table.append(
            f"{'':>3}  {'':9} {sum(k.us for k in rest):9.1f} {'':>6} {'':>5} {'':>9} {'':>8}  ({len(rest)} more)"
        )
    after = [
        f"glue budget (fused + copy + other, outside GEMM and attention): {_us(b['glue_us'])} us, "
        f"{_pct(b['glue_share'])} of kernel time (fused {_us(b['fused_us'])}, copy {_us(b['copy_us'])}, "
        f"other {_us(b['other_us'])} us)"
    ]
    if b["glue_floor_us"] is not None:
        after.append(
            f"glue at copy bandwidth ({t.copy_gbs:,.0f} GB/s): {_us(b['glue_floor_us'])} us for the "
            f"{_us(b['glue_floored_us'])} us whose bytes Inductor estimated; left above that floor "
            f"{_us(b['glue_left_us'])} us"
        )
    else:
        after.append("glue floor: n/a (no byte estimate for these kernels, or no bandwidth figure for this device)")
    gemm = f"GEMMs: {_us(b['gemm_us'])} us, {_pct(b['gemm_us'] / b['kernels_us'] if b['kernels_us'] else None)}"
    if t.gemm_flops:
        gemm += f"; {t.gemm_flops / 1e9:,.2f} GFLOP ({t.dtype}, FlopCounterMode over the eager forward)"
    if b["gemm_tflops"] is not None:
        gemm += f" -> {b['gemm_tflops']:,.3g} TFLOP/s"
        if b["peak_tflops"]:
            gemm += (
                f", {_pct(b['gemm_roofline_share'])} of the {b['peak_tflops']:,.0f} TFLOP/s dense peak "
                f"(fp32 matmul precision {t.precision})"
            )
    after.append(gemm)
    if b["attention_us"] or t.attention_flops:
        after.append(
            f"attention: {_us(b['attention_us'])} us, {_pct(b['attention_us'] / b['kernels_us'] if b['kernels_us'] else None)}"
            + (f"; {t.attention_flops / 1e9:,.2f} GFLOP" if t.attention_flops else "")
        )
    after += [f"note: {n}" for n in t.notes]
    if columns is not None:
        prose, after = ([textwrap.fill(ln, max(40, columns - 1)) for ln in part] for part in (prose, after))
    return "\n".join(prose + table + after)
