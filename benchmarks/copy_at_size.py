"""How fast is a plain device-to-device copy of the same size as each catalog shape?

Usage: python benchmarks/copy_at_size.py [TASK ...]   (cuda only)
The "% of copy BW" in forge-tui's measurements divides achieved GB/s by the copy bandwidth
of a 1 GiB copy. A small operator cannot reach that: launch, ramp-up and tail are a fixed
few microseconds. For every timed shape of the catalog this times ``dst.copy_(src)`` over
buffers of half the shape's counted bytes each (the same bytes read + written) with
``triton.testing.do_bench(..., return_mode="median")`` (L2 cleared before each rep), and
the 1 GiB copy the same way, and prints Markdown: the size-matched copy's time, GB/s and
share of the large copy's GB/s, i.e. the ceiling that "% of copy BW" should be read against.
"""

from __future__ import annotations

import argparse

import torch

from forge_tui.tasks.catalog import catalog


def copy_gbs(nbytes: int) -> tuple[float, float]:
    """(median ms, GB/s counting read + write) of a device-to-device copy of ``nbytes``."""
    from triton.testing import do_bench

    src = torch.empty(max(nbytes // 4, 1), dtype=torch.float32, device="cuda").fill_(1.0)
    dst = torch.empty_like(src)
    ms = do_bench(lambda: dst.copy_(src), return_mode="median")
    return ms, 2 * src.numel() * 4 / (ms * 1e-3) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("tasks", nargs="*")
    a = ap.parse_args()
    big_ms, big = copy_gbs(1 << 30)
    print(f"1 GiB device-to-device copy: {big_ms * 1e3:.1f} us, {big:.0f} GB/s ({torch.cuda.get_device_name()})\n")
    print("| task | shape | bytes moved | copy of the same bytes us | copy GB/s | % of the 1 GiB copy |")
    print("|---|---|---|---|---|---|")
    for name, task in catalog().items():
        if a.tasks and name not in a.tasks:
            continue
        for shape, dims in task.shapes_for("cuda").items():
            b = task.bytes_moved(dims)
            ms, gbs = copy_gbs(b // 2)
            print(
                f"| {name} | {shape} | {b / 1e6:.1f} MB | {ms * 1e3:.1f} | {gbs:.0f} | {100 * gbs / big:.0f}% |",
                flush=True,
            )


if __name__ == "__main__":
    main()
