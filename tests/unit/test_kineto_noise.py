"""Kineto's start/stop lines, written below Python to descriptor 2, are kept off the terminal;
every other line written there meanwhile reaches it."""

import os
import subprocess
import sys
import textwrap


def test_only_kinetos_lines_are_dropped():
    code = textwrap.dedent(
        """
        import os
        from forge_tui.evaluate.kernel_profile import _kineto_lines_dropped
        with _kineto_lines_dropped():
            os.write(2, b"USDT:12-02 15:20:01 123:456 SyncActivityProfilerHandler.cpp:52] profiler_start\\n")
            os.write(2, b"a real warning\\n")
            os.write(2, b"USDT:12-02 15:20:02 123:456 SyncActivityProfilerHandler.cpp:59] profiler_stop\\n")
        os.write(2, b"after\\n")
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == ["a real warning", "after"]
