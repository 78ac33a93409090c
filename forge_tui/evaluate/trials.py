"""Correctness trials and timing of a candidate library, inside the worker process.

Only the worker imports this module (it imports torch). Everything here follows
EVALUATION-CHECKS.md; the check numbers are cited where they are implemented:

* candidate first, its output copied out, reference after, and the reference's memory
  poisoned before it is freed (2); the candidate gets its own copies of the inputs and they
  are checked unchanged (3); outputs poisoned with NaN before every call (4); fresh random
  inputs per trial and per timing set, rotated during timing, the last timed output
  verified (5); several shapes and value distributions (6); an fp64 reference and
  dtype-aware tolerances scaled to the output's magnitude, non-finite outputs fail (8);
  a second call on identical inputs must give identical bits (9); the return code and the
  device's error state after every call (10); whole-device synchronise in the measured
  window and a host-clock cross-check (12); L2 flush before every sample, warm-up, median
  with p10/p90 and CV, re-measurement when noisy (15, 16); candidate and eager baseline
  interleaved sample by sample in the same process (17); NVML clocks, temperature and
  throttle reasons around each timing block (19); one timing job per GPU (20).

The code lives in :mod:`~forge_tui.evaluate.launch` (loading and calling the library),
:mod:`~forge_tui.evaluate.correctness` (the trials), :mod:`~forge_tui.evaluate.timers`
(timers, statistics, lock, NVML) and here (:func:`time_shape`, the timing loop); every
name stays importable from this module.
"""

from __future__ import annotations

from typing import Callable, Mapping, Optional, cast

import torch

from forge_tui.evaluate.backends import available_backends
from forge_tui.evaluate.correctness import _finite, compare, run_correctness
from forge_tui.evaluate.launch import (
    BackendLike,
    CandidateFault,
    Launcher,
    _as_tuple,
    _bits,
    _sync,
    alloc_outputs,
    input_generator,
    poison_,
)
from forge_tui.evaluate.timers import CudaEventTimer, HostClockTimer, Stats, Telemetry, Timer, gpu_lock, make_timer
from kernels.base import TaskSpec

#: Timing settings per backend name (each backend's ``timing``). cuda: CUDA events; host: perf_counter.
TIMING = {b.name.value: b.timing for b in available_backends()}

__all__ = [
    "TIMING",
    "BackendLike",
    "CandidateFault",
    "CudaEventTimer",
    "HostClockTimer",
    "Launcher",
    "Stats",
    "Telemetry",
    "Timer",
    "_as_tuple",
    "_bits",
    "_finite",
    "_sync",
    "alloc_outputs",
    "compare",
    "gpu_lock",
    "input_generator",
    "make_timer",
    "run_correctness",
    "time_shape",
]


def time_shape(
    timer: Timer,
    launcher: Optional[Launcher],
    task: TaskSpec,
    dims: Mapping[str, int],
    device: str,
    seed: int,
    eager: Optional[Callable] = None,
    progress: Callable[..., None] = lambda *a, **k: None,
) -> dict:
    """Time the candidate (if any) and the eager baseline (if given) interleaved on one shape.

    Inputs: ``sets`` fresh random input sets, rotated sample by sample (check 5), checked
    unchanged after the last round against a second draw from the same seed (check 3). The eager
    output is poisoned right after each eager sample, outside the timed window, so it never
    sits in memory as an answer for the candidate. The candidate's output of its last timed
    call is returned for verification.

    Returns ``{"candidate": Stats, "candidate_host": Stats, "eager": Stats, "eager_host": Stats,
    "last_inputs": [...], "last_outputs": [...], "rounds": int}`` (keys absent when not timed).
    """
    cfg = timer.cfg
    gen = input_generator(seed, device)
    sets = [task.make_inputs(dims, gen, device, "normal") for _ in range(cfg["sets"])]
    outs = [alloc_outputs(task, dims, device) for _ in range(cfg["sets"])]
    cand_args = [launcher.args(i, o, dims) for i, o in zip(sets, outs)] if launcher else []
    rc_bad: list = []
    # cand and eag are only called under `if launcher:` / `if eager:` below
    run_candidate = cast(Launcher, launcher)
    run_eager = cast(Callable, eager)

    def cand(k: int):
        rc = run_candidate(cand_args[k])
        if rc != 0:
            rc_bad.append(rc)

    def eag(k: int):
        return run_eager(*sets[k])

    for w in range(cfg["warmup"]):
        if launcher:
            cand(w % cfg["sets"])
        if eager:
            for r in _as_tuple(eag(w % cfg["sets"])):
                poison_(r)
    _sync(timer.backend)
    if rc_bad:
        raise RuntimeError(f"forge_launch returned {rc_bad[0]} during warm-up")
    c_dev, c_host, e_dev, e_host = [], [], [], []
    rounds, last_k = 0, 0
    while True:
        rounds += 1
        progress("timing", round=rounds)
        for i in range(cfg["samples"]):
            k = i % cfg["sets"]
            if eager:
                d, h, ret = timer.sample(lambda: eag(k))
                e_dev.append(d)
                e_host.append(h)
                for r in _as_tuple(ret):
                    poison_(r)
            if launcher:
                for o in outs[k]:  # poisoned before every timed call (check 4): skipped work shows
                    poison_(o)
                d, h, _ = timer.sample(lambda: cand(k))
                c_dev.append(d)
                c_host.append(h)
                last_k = k
        if rc_bad:
            raise RuntimeError(f"forge_launch returned {rc_bad[0]} during timing")
        cvs = [Stats.of(x).cv for x in (c_dev, e_dev) if x]
        if rounds >= cfg["max_rounds"] or all(cv <= cfg["cv_target"] for cv in cvs):
            break
    if launcher:  # the timed calls left their inputs as drawn (check 3): draw them again and compare
        again = input_generator(seed, device)
        names = [a.name for a in task.args if a.role == "in"]
        for k in range(cfg["sets"]):
            pristine = task.make_inputs(dims, again, device, "normal")
            changed = [n for n, x, p in zip(names, sets[k], pristine) if not torch.equal(_bits(x), _bits(p))]
            if changed:
                raise RuntimeError(f"the candidate modified its input(s) {', '.join(changed)} during timing")
    out: dict = {"rounds": rounds}
    if launcher:
        out.update(
            candidate=Stats.of(c_dev),
            candidate_host=Stats.of(c_host),
            last_inputs=sets[last_k],
            last_outputs=outs[last_k],
        )
    if eager:
        out.update(eager=Stats.of(e_dev), eager_host=Stats.of(e_host))
    return out
