"""The program Nsight Compute profiles: one launch of a node's compiled kernel (cuda only).

Run by :func:`forge_tui.evaluate.profile.capture_profile` as
``ncu --profile-from-start off ... python -m forge_tui.evaluate.profile_child REQUEST``
where ``REQUEST`` is a JSON object ``{"library": path, "task": task ref, "backend": "cuda",
"seed": int}`` (the task ref of :func:`forge_tui.tasks.refs.task_ref`). It builds the
harness's inputs for the task's *first timed shape* the way the worker's timing does
(:func:`forge_tui.evaluate.launch.input_generator`, ``make_inputs(..., "normal")``,
NaN-poisoned outputs), calls ``forge_launch`` once to warm up (module load, lazy
initialisation: not profiled), then once between ``cudaProfilerStart`` and
``cudaProfilerStop``: only the kernels of that one call are profiled.

Every piece of GPU work (input generation, both calls) happens under the per-GPU timing
lock (:func:`forge_tui.evaluate.timers.gpu_lock`, check 20), so a profile never overlaps a
worker's timing on the same GPU. The last line on stdout is ``FORGE_PROFILE_CHILD {json}``
with ``shape``, ``dims`` and the call's return code ``rc``; exit code 0 when the call
returned 0, 3 when it did not or the device reported an error.
"""

from __future__ import annotations

import json
import sys

#: Prefix of the child's one result line on stdout.
MARK = "FORGE_PROFILE_CHILD "


def main(argv: list[str]) -> int:
    """Launch the request's kernel once under the profiler; see the module docstring."""
    import torch

    from forge_tui.evaluate.backends import get_backend
    from forge_tui.evaluate.launch import Launcher, alloc_outputs, input_generator
    from forge_tui.evaluate.timers import gpu_lock
    from forge_tui.tasks.refs import load_task_ref

    req = json.loads(argv[0])
    task = load_task_ref(req["task"], isolate=False)
    be = get_backend(req.get("backend", "cuda"))
    be.prepare_worker()
    device = be.torch_device
    shape, dims = next(iter(task.shapes_for(be.name).items()))
    launcher = Launcher(req["library"], task, be)
    lock_id = str(be.device_facts().get("uuid") or "cpu")
    with gpu_lock(lock_id):
        gen = input_generator(int(req.get("seed", 0)), device)
        inputs = task.make_inputs(dims, gen, device, "normal")
        outputs = alloc_outputs(task, dims, device)
        args = launcher.args(inputs, outputs, dims)
        rc = launcher(args)  # warm-up, outside the profiled range
        be.synchronize()
        if rc == 0:
            torch.cuda.profiler.start()
            try:
                rc = launcher(args)
                be.synchronize()
            finally:
                torch.cuda.profiler.stop()
    print(MARK + json.dumps({"shape": shape, "dims": dict(dims), "rc": rc}), flush=True)
    return 0 if rc == 0 else 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
