"""The evaluation worker: a persistent process that loads candidates and measures them.

Started by :class:`forge_tui.evaluate.evaluator.Evaluator` as
``python -m forge_tui.evaluate.worker FD`` in its own session (process group), with a
private temporary directory as its working directory and its stdout/stderr on a pipe the
parent drains and caps. Requests and replies are pickled dicts on the socket ``FD``:

* ``{"op": "init", "task": {...}, "backend": ...}`` -> device facts;
* ``{"op": "baseline", "seed": int, "compile": bool}`` -> eager (and torch.compile) timings;
* ``{"op": "evaluate", "library": path, "seed": int, "trials": int}`` -> the candidate's
  correctness rows and interleaved timings against eager;
* ``{"op": "exit"}``.

Before each stage the worker sends ``{"progress": stage, ...}``; the parent applies that
stage's time limit and kills the whole process group when it runs out. A candidate that
leaves the CUDA context broken gets a ``fatal`` reply and the worker exits.
"""
from __future__ import annotations

import importlib
import os
import platform
import sys
import time
import traceback
from multiprocessing.connection import Connection


def load_task(ref: dict):
    """Rebuild a TaskSpec in this process from a ref of :func:`forge_tui.search.runner.task_ref`.

    ``{"module", "name"}`` is a catalog task; ``{"file", "text", "name", "origin"}`` a task file
    (the stored ``text`` wins over the file on disk). Raises TaskError (task files) or
    ValueError (a catalog task that no longer exists).
    """
    if ref.get("file") or ref.get("text"):
        from kernels.taskfile import load_task_file

        return load_task_file(ref.get("file") or f"{ref.get('name', 'task')}.py", origin=ref.get("origin", "file"),
                              text=ref.get("text"))
    mod = importlib.import_module(ref["module"])
    for spec in getattr(mod, "TASKS", []):
        if spec.name == ref["name"]:
            return spec
    raise ValueError(f"task {ref['name']!r} not found in {ref['module']}")


class Worker:
    """Holds the task, device state and timers between requests."""

    def __init__(self, conn: Connection):
        self.conn = conn
        self.task = None
        self.backend = "host"
        self.device = "cpu"

    def progress(self, stage: str, **detail) -> None:
        self.conn.send({"progress": stage, **detail})

    # ------------------------------------------------------------------ ops
    def init(self, msg: dict) -> dict:
        import torch

        from forge_tui.evaluate import trials

        self.task = load_task(msg["task"])
        self.backend = msg["backend"]
        facts: dict = {"torch": torch.__version__, "python": platform.python_version(),
                       "host": platform.node(), "machine": platform.machine()}
        if self.backend == "cuda":
            if not torch.cuda.is_available():
                raise RuntimeError("no CUDA device visible to torch: check the driver, or pass --backend host")
            self.device = "cuda"
            torch.cuda.init()
            props = torch.cuda.get_device_properties(0)
            facts.update(
                gpu=props.name, capability=f"{props.major}.{props.minor}", sm_count=props.multi_processor_count,
                memory_gb=round(props.total_memory / 1e9, 1), l2_mb=round(getattr(props, "L2_cache_size", 0) / 2**20, 1),
                cuda_runtime=torch.version.cuda, uuid=str(getattr(props, "uuid", "")),
            )
            self.telemetry = trials.Telemetry("cuda")
            if self.telemetry.handle is not None:
                try:
                    facts["driver"] = self.telemetry.nv.nvmlSystemGetDriverVersion()
                except Exception:
                    pass
            facts["copy_gbs"] = self._copy_bandwidth()
        else:
            torch.set_num_threads(1)  # the contract forbids threads: time eager on one core too
            self.device = "cpu"
            self.telemetry = trials.Telemetry("host")
            facts.update(gpu="", cpu=platform.processor() or platform.machine(), torch_threads=1,
                         copy_gbs=self._copy_bandwidth())
        self.timer = trials.Timer(self.backend, self.device)
        self.facts = facts
        return facts

    def _copy_bandwidth(self) -> float:
        """Device-to-device (or host memcpy) copy bandwidth in GB/s, bytes read + written."""
        import torch

        n = (1 << 30) if self.backend == "cuda" else (256 << 20)
        src = torch.empty(n // 4, dtype=torch.float32, device=self.device).fill_(1.0)
        dst = torch.empty_like(src)
        best = float("inf")
        for _ in range(5 if self.backend == "cuda" else 3):
            if self.backend == "cuda":
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                dst.copy_(src)
                e.record()
                torch.cuda.synchronize()
                best = min(best, s.elapsed_time(e) / 1e3)
            else:
                t0 = time.perf_counter()
                dst.copy_(src)
                best = min(best, time.perf_counter() - t0)
        del src, dst
        return round(2 * n / best / 1e9, 1)

    def baseline(self, msg: dict) -> dict:
        from forge_tui.evaluate import trials

        task, out = self.task, {}
        eager = task.reference
        compiled = None
        compile_error = ""
        if msg.get("compile") and self.backend == "cuda":
            try:
                import torch

                self.progress("compile_baseline")
                compiled = torch.compile(task.reference)
            except Exception as exc:  # torch.compile may be missing pieces on a device
                compile_error = f"{type(exc).__name__}: {exc}".splitlines()[0]
        for shape_name, dims in task.shapes_for(self.backend).items():
            self.progress("baseline", shape=shape_name)
            before = self.telemetry.read()
            with trials.gpu_lock(self.facts.get("uuid") or "cpu"):
                r = trials.time_shape(self.timer, None, task, dims, self.device, msg["seed"], eager=eager,
                                      progress=self.progress)
                entry = {"eager": _stats(r["eager"]), "eager_host": _stats(r["eager_host"])}
                if compiled is not None:
                    try:
                        rc = trials.time_shape(self.timer, None, task, dims, self.device, msg["seed"], eager=compiled,
                                               progress=self.progress)
                        entry["compile"] = _stats(rc["eager"])
                    except Exception as exc:
                        compile_error = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
                        compiled = None
            entry["clocks"] = {"before": before, "after": self.telemetry.read()}
            out[shape_name] = entry
        return {"shapes": out, "compile_error": compile_error}

    def evaluate(self, msg: dict) -> dict:
        from forge_tui.evaluate import trials

        task = self.task
        self.progress("load")
        try:
            launcher = trials.Launcher(msg["library"], task, self.backend)
        except (OSError, RuntimeError) as exc:
            return {"status": "crashed", "error": f"cannot load the library: {exc}"}
        passed, rows, error = trials.run_correctness(launcher, task, self.backend, self.device, msg["seed"],
                                                     msg.get("trials", 3), self.progress)
        if not passed:
            return {"status": "incorrect", "error": error, "correctness": rows}
        shapes: dict = {}
        for shape_name, dims in task.shapes_for(self.backend).items():
            self.progress("timing", shape=shape_name)
            before = self.telemetry.read()
            with trials.gpu_lock(self.facts.get("uuid") or "cpu"):
                try:
                    r = trials.time_shape(self.timer, launcher, task, dims, self.device, msg["seed"] + 7919,
                                          eager=task.reference, progress=self.progress)
                except RuntimeError as exc:
                    if isinstance(exc, trials.CandidateFault):
                        raise
                    return {"status": "incorrect", "error": f"{exc} on {shape_name}", "correctness": rows}
            after = self.telemetry.read()
            # verify the output of the last timed call (check 5)
            import torch

            refs = trials._as_tuple(task.reference(*[x.to(torch.float64) for x in r["last_inputs"]]))
            for i, (o, ref) in enumerate(zip(r["last_outputs"], refs)):
                ok, max_abs, max_rel, tol, note = trials.compare(o, ref, task.outputs(dims)[i][1])
                if not ok:
                    return {"status": "incorrect", "correctness": rows,
                            "error": f"output of the last timed call on {shape_name} is wrong: {note}"}
            shapes[shape_name] = {
                "candidate": _stats(r["candidate"]), "candidate_host": _stats(r["candidate_host"]),
                "eager": _stats(r["eager"]), "eager_host": _stats(r["eager_host"]), "rounds": r["rounds"],
                "clocks": {"before": before, "after": after},
            }
        return {"status": "ok", "correctness": rows, "shapes": shapes}

    # ------------------------------------------------------------------ loop
    def serve(self) -> int:
        from forge_tui.evaluate.trials import CandidateFault

        while True:
            try:
                msg = self.conn.recv()
            except (EOFError, OSError):
                return 0
            op = msg.get("op")
            if op == "exit":
                return 0
            try:
                handler = {"init": self.init, "baseline": self.baseline, "evaluate": self.evaluate}[op]
                self.conn.send({"result": handler(msg)})
            except CandidateFault as exc:
                self.conn.send({"result": {"status": "crashed", "error": str(exc)}, "fatal": True})
                return 3
            except Exception as exc:
                fatal = "CUDA error" in str(exc) or "CUDA-capable" in str(exc)
                self.conn.send({"error": f"{type(exc).__name__}: {exc}".splitlines()[0][:2000],
                                "traceback": traceback.format_exc()[-4000:], "fatal": fatal})
                if fatal:
                    return 3


def _stats(s) -> dict:
    d = s.as_dict()
    d["samples"] = [round(x, 5) for x in s.samples]
    return d


def main() -> int:
    fd = int(sys.argv[1])
    conn = Connection(fd)
    code = Worker(conn).serve()
    sys.stdout.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
