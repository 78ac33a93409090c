"""Harness faults are never the kernel's (issue 17): a full disk under the compile cache ends
the run ``interrupted`` with ``disk full: <path>`` (exit 3), the node is not ``compile_error``;
the compiler runs under a memory cap and a macro bomb is a one-line ``compile_error`` saying so."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess

import pytest

from forge_tui.core.status import NodeStatus, RunStatus
from forge_tui.evaluate.compile import compile_source
from forge_tui.evaluate.harness import DiskFull, disk_full_in
from forge_tui.evaluate.verdict import _compile_verdict

SEED = 'extern "C" int forge_launch() { return 0; }\n'

#: 10^9 tokens of ``1+1+...``: g++ took 9.5 GB on it without a cap (issue 17).
BOMB = """#define A(x) x x x x x x x x x x
#define B(x) A(A(A(x)))
#define C(x) B(B(B(x)))
int v[] = { C(1+) 0 };
extern "C" int forge_launch() { return v[0]; }
"""


def test_macro_bomb_hits_the_compiler_memory_cap(tmp_path, monkeypatch):
    monkeypatch.setenv("FORGE_COMPILE_MEM_MB", "400")
    res = compile_source(BOMB, "host", root=tmp_path, timeout_s=60)
    assert not res.ok and not res.timed_out
    verdict = _compile_verdict(res)
    assert verdict is not None and verdict.status == NodeStatus.COMPILE_ERROR
    assert "\n" not in verdict.error and "400 MB memory cap" in verdict.error, verdict.error
    assert compile_source(SEED, "host", root=tmp_path).ok  # a normal kernel compiles under the cap


def test_compiler_disk_full_lines_name_the_directory():
    full = disk_full_in("cc1plus: fatal error: error writing to /tmp/ccAb12.s: No space left on device", "/c")
    assert isinstance(full, DiskFull) and full.line.startswith("disk full: /tmp (")
    full = disk_full_in("/usr/bin/ld: final link failed: No space left on device\ncollect2: error", "/cache/k.x")
    assert full is not None and full.line.startswith("disk full: /cache/k.x (")
    assert disk_full_in("a.cpp:3: error: expected ';'", "/c") is None


@pytest.fixture
def full_disk(tmp_path):
    """A directory on a 1 MB tmpfs that is full (root only: mounting needs it)."""
    where = tmp_path / "full"
    where.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root to mount a small tmpfs")
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)]).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        fd = os.open(where / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
        yield where / "cache"
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_compile_on_a_full_disk_is_never_a_compile_error(full_disk):
    with pytest.raises(DiskFull) as err:  # the source cannot be written: ENOSPC, the cache named
        compile_source(SEED, "host", root=full_disk)
    assert err.value.line == f"disk full: {full_disk}" and isinstance(err.value.__cause__, OSError)
    assert err.value.__cause__.errno == errno.ENOSPC
    filler = full_disk.parent / "filler"
    os.truncate(filler, filler.stat().st_size - 12 * 1024)  # room for the source, not for the library
    with pytest.raises(DiskFull, match="^disk full: .*No space left on device"):
        compile_source(SEED, "host", root=full_disk)


@pytest.mark.slow  # a search starts its worker (~10 s on 2 shared cores)
def test_search_on_a_full_compile_cache_is_interrupted_not_compile_error(full_disk, tmp_path, monkeypatch):
    from forge_tui.search.runner import Search, SearchError, create_run
    from forge_tui.tasks.catalog import catalog
    from store import Store

    monkeypatch.setenv("FORGE_CACHE", str(full_disk))
    store = Store(tmp_path / "forge.db")
    task = catalog()["softmax"]
    run = create_run(store, task, backend="host", iterations=2, config={"compile_baseline": False})
    # a stored baseline: the search goes straight to compiling the seed kernel
    store.update_run(run.id, baseline_json=json.dumps({"eager": {s: 1.0 for s in task.shapes}, "compile": {}}))
    lines: list[str] = []
    with pytest.raises(SearchError) as err:
        Search(store, run.id, log=lines.append).execute()
    assert err.value.exit_code == 3 and err.value.line.startswith(f"disk full: {full_disk}"), err.value.line
    final = store.get_run(run.id)
    assert final.status == RunStatus.INTERRUPTED and final.status_reason.startswith("disk full: ")
    assert "forge-tui resume" in final.status_reason and "\n" not in final.status_reason
    assert all(n.status != NodeStatus.COMPILE_ERROR for n in store.nodes(run.id))
    assert final.lease_token is None  # released: resume needs no takeover
