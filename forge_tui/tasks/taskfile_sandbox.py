"""Loading a task file in a child process with a memory cap and a time limit.

A task file is Python that runs with the user's rights; loading it executes its import-time
code, ``get_init_inputs()``, the model's constructor, ``get_inputs()`` (on the meta device where
it can) and the forward. :func:`derive_isolated` does that in a child
(``python -m forge_tui.tasks.taskfile_sandbox REQUEST RESULT``) whose address space is capped
with ``RLIMIT_AS`` (:func:`memory_cap_mb`, default 8192 MB) and which is killed, with its
process group, after :func:`time_limit_s` seconds (default 120). What it derives comes back
as JSON (never pickled objects), and every failure is one line: a refusal of the file, memory
above the cap, the time limit, or the child dying on a signal.

The cap is a safety limit, not a sandbox: the file can still read and write what the user can.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from forge_tui.core.env import env_number
from forge_tui.tasks.catalog import TaskError

#: Default memory cap of the loading child (MB); ``FORGE_LOAD_MEMORY_MB`` overrides it.
DEFAULT_MEMORY_MB = 8192
#: Default time limit of the loading child (seconds); ``FORGE_LOAD_TIMEOUT_S`` overrides it.
DEFAULT_TIMEOUT_S = 120.0


def memory_cap_mb() -> int:
    """The loading child's address-space cap in MB (``FORGE_LOAD_MEMORY_MB``, default 8192).
    Raises TaskError for a value that is not a positive number."""
    return int(env_number("FORGE_LOAD_MEMORY_MB", float(DEFAULT_MEMORY_MB), error=TaskError))


def time_limit_s() -> float:
    """The loading child's wall-clock limit in seconds (``FORGE_LOAD_TIMEOUT_S``, default 120)."""
    return env_number("FORGE_LOAD_TIMEOUT_S", DEFAULT_TIMEOUT_S, error=TaskError)


def derive_isolated(path: Path, text: str, origin: str, mode: str) -> dict:
    """What :meth:`FileTask.derive` returns for the file, computed in a capped child process.

    Raises:
        TaskError: one line: the file's own refusal, ``needs more than the N MB memory cap``,
            ``did not finish loading within N s``, or the child's death by a signal.
    """
    cap, limit = memory_cap_mb(), time_limit_s()
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["FORGE_LOAD_CAP_MB"] = str(cap)
    with tempfile.TemporaryDirectory(prefix="forge-load-") as tmp:
        req, res, log = Path(tmp, "request.json"), Path(tmp, "result.json"), Path(tmp, "log.txt")
        req.write_text(json.dumps({"path": str(path), "text": text, "origin": origin, "mode": mode}))
        with open(log, "wb") as log_f:
            proc = subprocess.Popen(
                [sys.executable, "-m", "forge_tui.tasks.taskfile_sandbox", str(req), str(res)],
                stdin=subprocess.DEVNULL,
                stdout=log_f,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # its own process group: a timeout ends what it started too
            )
            try:
                rc = proc.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                _kill(proc)
                raise TaskError(
                    f"{path.name}: did not finish loading within {limit:g} s (a get_inputs() or model that "
                    "never returns?; FORGE_LOAD_TIMEOUT_S raises the limit)"
                ) from None
            except BaseException:
                _kill(proc)
                raise
        _echo(log)
        said = _last_line(log)
        try:
            answer = json.loads(res.read_text())
        except (OSError, ValueError):
            answer = None
    if isinstance(answer, dict) and "error" in answer:
        raise TaskError(str(answer["error"]))
    if isinstance(answer, dict) and "ok" in answer:
        return answer["ok"]
    if rc < 0:
        sig = signal.Signals(-rc).name if -rc in signal.valid_signals() else str(-rc)
        why = f" (killed by {sig}: out of memory?)" if -rc == signal.SIGKILL else f" (killed by {sig})"
        raise TaskError(f"{path.name}: loading it crashed{why}")
    if said:
        raise TaskError(f"{path.name}: loading it failed (exit code {rc}): {said}")
    raise TaskError(f"{path.name}: loading it failed (exit code {rc}) without a reason; see the output above")


def _last_line(log: Path) -> str:
    """The last non-empty line the child printed (a traceback's exception), at most 300 characters."""
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _echo(log: Path) -> None:
    """The file's prints (sent to stderr, as an in-process load does), at most 64 kB."""
    try:
        data = log.read_bytes()[-65536:]
    except OSError:
        return
    if data:
        sys.stderr.write(data.decode("utf-8", "replace"))
        sys.stderr.flush()


def derive_capped(path: Path, text: str, origin: str, mode: str, cap_mb: int) -> dict:
    """In this (child) process: cap the address space at ``cap_mb`` MB, derive the task.
    Returns ``{"ok": derived dict}`` or ``{"error": one line}``; never raises for the file's faults."""
    import resource

    os.environ["FORGE_LOAD_CAP_MB"] = str(cap_mb)
    cap = cap_mb * 2**20
    limit = f"the {cap_mb} MB memory cap (FORGE_LOAD_MEMORY_MB)"
    hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    if hard != resource.RLIM_INFINITY and hard < cap:  # a lower limit set from outside (ulimit -v) is the cap
        cap = hard
        os.environ["FORGE_LOAD_CAP_MB"] = str(hard >> 20)
        os.environ["FORGE_LOAD_CAP_OUTSIDE"] = "1"
        limit = f"the {hard >> 20} MB address-space limit set outside forge-tui (ulimit -v; FORGE_LOAD_MEMORY_MB is {cap_mb})"
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    try:
        from forge_tui.tasks.taskfile_steps import FileTask

        return {"ok": FileTask(path, text, origin, mode).derive()}
    except TaskError as exc:
        return {"error": str(exc)}
    except MemoryError:
        return {"error": f"{path.name}: loading it needs more than {limit}"}
    except BaseException as exc:  # noqa: BLE001 - SystemExit, RecursionError: still one line
        from forge_tui.tasks.loader import one_line

        return {"error": f"{path.name}: {one_line(exc, 300)}"}


def _child(request: str, result: str) -> int:
    """The child's work: :func:`derive_capped`, its answer written as JSON to ``result``."""
    req = json.loads(Path(request).read_text())
    cap_mb = int(os.environ.get("FORGE_LOAD_CAP_MB") or DEFAULT_MEMORY_MB)
    out = derive_capped(Path(req["path"]), req["text"], req["origin"], req["mode"], cap_mb)
    Path(result).write_text(json.dumps(out))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # no interpreter teardown: the file's atexit hooks and threads do not run


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1], sys.argv[2]))
