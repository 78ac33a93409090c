"""A cuda campaign exports each region's kernel with the library its search compiled
(``export --build``), so ``apply`` runs no nvcc of its own; where that build fails, the export
is written without it and apply compiles the source."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from forge_tui.campaign import report as rp


class FakeStore:
    def __init__(self):
        self.updates: list[dict] = []

    def get_run(self, run_id):
        return SimpleNamespace(id=run_id, best_node_id=9)

    def get_node(self, node_id):
        return SimpleNamespace(id=node_id)

    def update_campaign_region(self, rid, **fields):
        self.updates.append(fields)


def _region():
    return SimpleNamespace(id=1, region="R10", run_id=4, state="done", note="", export_dir="")


def test_a_cuda_export_carries_the_searchs_library_else_goes_without_it(tmp_path, monkeypatch):
    from forge_tui.model import export as ex

    asked: list[bool] = []

    def export_run(store, run_id, target, build=False):
        asked.append(build)
        if build and fail:
            raise ex.ExportError("--build: the kernel did not compile: nvcc not found")
        return SimpleNamespace(directory=Path(target))

    monkeypatch.setattr(ex, "export_run", export_run)
    lines: list[str] = []
    fail = False
    got = rp.export_region(FakeStore(), _region(), tmp_path, lines.append, build=True)
    assert got == str(tmp_path / "kernels" / "R10") and asked == [True]
    fail, asked[:] = True, []
    store = FakeStore()
    got = rp.export_region(store, _region(), tmp_path, lines.append, build=True)
    assert got == str(tmp_path / "kernels" / "R10") and asked == [True, False]
    assert "no kernel.so (--build: the kernel did not compile: nvcc not found); apply compiles the source" in lines[-2]
    assert store.updates[-1] == {"export_dir": got}
    asked[:] = []
    assert rp.export_region(FakeStore(), _region(), tmp_path, lines.append) and asked == [False]  # the host
