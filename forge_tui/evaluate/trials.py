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
(timers, statistics, lock, NVML) and here (:func:`time_shape`, the timing loop).
"""

from __future__ import annotations

from typing import Callable, Mapping, Optional, cast

import torch

from forge_tui.evaluate.backends import available_backends
from forge_tui.evaluate.holding import held, same_bits
from forge_tui.evaluate.launch import Launcher, _as_tuple, _sync, alloc_outputs, input_generator, poison_
from forge_tui.evaluate.timers import Stats, Timer, launches_per_window, timing_sets
from kernels.base import TaskSpec

#: Timing settings per backend name (each backend's ``timing``). cuda: CUDA events; host: perf_counter.
TIMING = {b.name.value: b.timing for b in available_backends()}

__all__ = ["TIMING", "time_shape"]


def _nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _out_bytes(task: TaskSpec, dims: Mapping[str, int]) -> int:
    """Bytes of one output set at ``dims`` (from the task's shapes and dtypes)."""
    n = 0
    for shape, dt in task.outputs(dims):
        numel = 1
        for s in shape:
            numel *= int(s)
        n += numel * getattr(torch, dt).itemsize
    return n


def time_shape(
    timer: Timer,
    launcher: Optional[Launcher],
    task: TaskSpec,
    dims: Mapping[str, int],
    device: str,
    seed: int,
    eager: Optional[Callable] = None,
    progress: Callable[..., None] = lambda *a, **k: None,
    mode: str = "cold",
) -> dict:
    """Time the candidate (if any) and the eager baseline (if given) interleaved on one shape.

    A sample is a window of ``n`` launches (:func:`~forge_tui.evaluate.timers.launches_per_window`:
    ``n`` launches last >= ~100 us), each launch on its own input/output set, replayed from one
    CUDA graph on cuda (:meth:`Timer.compile_window`); the sample is the window's time over
    ``n``. ``mode`` ``cold``: the cache is flushed before each window, so every launch reads
    and writes memory not in L2; ``warm``: the window's inputs are read into the cache first.
    Candidate and eager windows alternate (check 17) on the same sets.

    Inputs: ``max(n, sets)`` fresh random input sets (a multiple of ``n``; ``sets`` is the
    backend's, fewer when they would exceed the timer's memory budget:
    :func:`~forge_tui.evaluate.timers.timing_sets`), rotated window by
    window (check 5), checked unchanged after the last round against a second draw from the
    same seed (check 3). Every candidate output is poisoned with NaN before its window and
    checked after it for NaNs beyond those of the reference on the same inputs (check 4; the
    reference's NaNs counted on the eager window's own outputs when ``eager`` is given); the
    eager outputs are poisoned after each eager window, outside the timed span, so they never
    sit in memory as an answer for the candidate. The outputs of the last candidate window
    are returned for verification.

    Memory (I, O: one set's inputs and outputs): the sets (I + O each; no outputs when only
    ``eager`` is timed), each eager window's outputs in its CUDA graph's pool (O per set),
    and at the end one set drawn again (I): a problem larger than the budget, timed on one
    set, holds 2I + 2O.

    Returns ``{"candidate": Stats, "candidate_host": Stats, "eager": Stats, "eager_host": Stats,
    "last_inputs": [...], "last_outputs": [...], "window_sets": [(inputs, outputs), ...],
    "rounds": int, "mode": str, "launches": n, "graphed": {subject: bool}}`` (keys absent when
    not timed). Raises RuntimeError when the candidate fails, skips work or changes its inputs.
    """
    cfg = timer.cfg
    # the previous shape's graphs (the worker's timer lives across evaluations) and their
    # pools go before this shape's sets are drawn
    timer.release()
    gen = input_generator(seed, device)
    first_sets = timing_sets(int(task.bytes_moved(dims)), cfg["sets"], timer.budget_bytes)
    sets = [task.make_inputs(dims, gen, device, "normal") for _ in range(first_sets)]
    # outputs for the candidate only: eager allocates its own (in its window's graph pool)
    outs = [alloc_outputs(task, dims, device) if launcher else [] for _ in range(first_sets)]
    rc_bad: list = []
    run_candidate = cast(Launcher, launcher)  # only called under `if launcher:`
    run_eager = cast(Callable, eager)  # only called under `if eager:`
    pre_args: dict = {}

    def cand(k: int, fresh: bool = False) -> None:
        if fresh or k not in pre_args:  # under graph capture the args carry the capture stream
            args = run_candidate.args(sets[k], outs[k], dims)
            if not fresh:
                pre_args[k] = args
        else:
            args = pre_args[k]
        rc = run_candidate(args)
        if rc != 0:
            rc_bad.append(rc)

    def eag(k: int):
        return run_eager(*sets[k])

    def poison(tensors) -> None:
        for r in _as_tuple(tensors):
            poison_(r)  # NaN, or poison bytes for integer and bool outputs

    for w in range(cfg["warmup"]):
        if launcher:
            cand(w % first_sets)
        if eager:
            poison(eag(w % first_sets))
    _sync(timer.backend)
    if rc_bad:
        raise RuntimeError(f"forge_launch returned {rc_bad[0]} during warm-up")

    # one-launch estimate (the faster subject decides n, so both windows reach the target)
    est: list = []
    if launcher:
        est.append(min(timer.sample(lambda: cand(0))[0] for _ in range(3)))
    for _ in range(3 if eager else 0):
        d, _h, ret = timer.sample(lambda: eag(0))
        poison(ret)
        est.append(d)
        del ret  # an eager output held to the end of the timing is one more output set
    set_bytes = _nbytes(sets[0]) + _out_bytes(task, dims)
    n = launches_per_window(min(est), set_bytes, mode, timer.cache_bytes, timer.budget_bytes)
    n_sets = max(n, first_sets)
    n_sets += (-n_sets) % n
    while len(sets) < n_sets:
        sets.append(task.make_inputs(dims, gen, device, "normal"))
        outs.append(alloc_outputs(task, dims, device) if launcher else [])
    windows = [list(range(w * n, (w + 1) * n)) for w in range(n_sets // n)]

    def cand_window(ks: list, fresh: bool):
        def body():
            before = len(rc_bad)
            for k in ks:
                cand(k, fresh)
            if fresh and len(rc_bad) > before:  # a failed launch under capture: run uncaptured
                del rc_bad[before:]
                raise RuntimeError("launch failed under capture")

        return body

    def eager_window(ks: list):
        return lambda: [eag(k) for k in ks]

    graphed: dict = {}
    cand_runs, eager_runs = [], []
    for ks in windows:
        if launcher:
            run, graphed["candidate"] = timer.compile_window(cand_window(ks, True), cand_window(ks, False))
            cand_runs.append(run)
        if eager:
            run, graphed["eager"] = timer.compile_window(eager_window(ks))
            eager_runs.append(run)
    _sync(timer.backend)
    if rc_bad:
        raise RuntimeError(f"forge_launch returned {rc_bad[0]} before timing")

    def prepare(ks: list) -> None:
        if mode == "warm":
            timer.touch([x for k in ks for x in sets[k]])

    skipped = torch.zeros((), dtype=torch.bool, device=device)
    # NaNs each output may hold (the reference's own, e.g. log of a negative input): more
    # after a timed launch means the poison survived, i.e. the launch skipped work. Counted on
    # eager's outputs of each window (one replay, no output set more), else on the reference's.
    legit_nan: dict = {}
    if launcher:

        def count(k: int, refs, then_poison: bool) -> None:
            refs = _as_tuple(refs)
            legit_nan[k] = [
                refs[i].isnan().sum() if i < len(refs) and o.is_floating_point() else None
                for i, o in enumerate(outs[k])
            ]
            if then_poison:
                poison(refs)

        for w, ks in enumerate(windows):
            if eager:
                rets = cast(list, eager_runs[w]())
                for j, k in enumerate(ks):
                    count(k, rets[j], True)
                del rets
            else:
                for k in ks:
                    count(k, task.reference(*sets[k]), False)
    held("timing.sets")
    c_dev, c_host, e_dev, e_host = [], [], [], []
    rounds, last_w, i = 0, 0, 0
    while True:
        rounds += 1
        progress("timing", round=rounds)
        for _ in range(cfg["samples"]):
            w = i % len(windows)
            i += 1
            ks = windows[w]
            if eager:
                prepare(ks)
                d, h, ret = timer.window(eager_runs[w], n, mode)
                e_dev.append(d)
                e_host.append(h)
                for r in cast(list, ret):  # eager_window's list of the window's outputs
                    poison(r)
            if launcher:
                for k in ks:  # poisoned before every timed window (check 4): skipped work shows
                    poison(outs[k])
                prepare(ks)
                d, h, _ = timer.window(cand_runs[w], n, mode)
                c_dev.append(d)
                c_host.append(h)
                for k in ks:
                    for o, legit in zip(outs[k], legit_nan[k]):
                        if legit is not None:
                            skipped |= o.isnan().sum() > legit
                last_w = w
        if rc_bad:
            raise RuntimeError(f"forge_launch returned {rc_bad[0]} during timing")
        if launcher and bool(skipped):
            raise RuntimeError("a timed launch left NaN in its output: the candidate skipped work")
        cvs = [Stats.of(x).cv for x in (c_dev, e_dev) if x]
        if rounds >= cfg["max_rounds"] or all(cv <= cfg["cv_target"] for cv in cvs):
            break
    if launcher:  # the timed calls left their inputs as drawn (check 3): draw them again and compare
        again = input_generator(seed, device)
        names = [a.name for a in task.args if a.role == "in"]
        for k in range(n_sets):
            pristine = task.make_inputs(dims, again, device, "normal")
            changed = [nm for nm, x, p in zip(names, sets[k], pristine) if not same_bits(x, p)]
            held("timing.inputs")
            if changed:
                raise RuntimeError(f"the candidate modified its input(s) {', '.join(changed)} during timing")
    out: dict = {"rounds": rounds, "mode": mode, "launches": n, "graphed": graphed}
    if launcher:
        last = windows[last_w]
        out.update(
            candidate=Stats.of(c_dev),
            candidate_host=Stats.of(c_host),
            last_inputs=sets[last[-1]],
            last_outputs=outs[last[-1]],
            window_sets=[(sets[k], outs[k]) for k in last],
        )
    if eager:
        out.update(eager=Stats.of(e_dev), eager_host=Stats.of(e_host))
    return out
