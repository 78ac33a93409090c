"""The typed configuration of one search run, with the one set of defaults the CLI and the
app share (STYLE.md 10). Imports nothing of ours but ``core``.

``RunConfig`` holds what a person chose; ``forge_tui.search.create`` turns it into a stored
run (resolving ``auto`` backend, the default ``parallel`` and the LLM endpoint's layered
settings: defaults < config file < environment < these fields).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional

from forge_tui.core.backends import backend_facts
from forge_tui.core.errors import ForgeError
from forge_tui.core.status import BackendName, ProposerName

#: ``backend`` value that picks ``cuda`` where a GPU and nvcc exist, else ``host``.
AUTO = "auto"
#: Every ``backend`` a person may ask for.
BACKEND_CHOICES: tuple[str, ...] = (AUTO, *BackendName)
#: Every proposer.
PROPOSER_CHOICES: tuple[str, ...] = tuple(ProposerName)
#: ``profile``: ``auto`` captures an Nsight Compute profile of each ok node on cuda where ncu
#: exists (forge_tui.evaluate.profile); ``off`` never runs ncu.
PROFILE_CHOICES: tuple[str, ...] = (AUTO, "off")
#: ``precision``: PyTorch's fp32 matmul precision (``torch.set_float32_matmul_precision``):
#: ``highest`` fp32 arithmetic (PyTorch's default), ``high`` TF32 tensor cores (10-bit
#: mantissa inputs), ``medium`` bf16 tensor cores (7-bit mantissa inputs). The worker sets it
#: before the reference and the baselines run, and the fp32 tolerance follows it
#: (``forge_tui.core.tolerance.tolerance_for``).
PRECISION_CHOICES: tuple[str, ...] = ("highest", "high", "medium")
#: The precision of a run stored before the setting existed, and of every run not given one.
DEFAULT_PRECISION = "highest"

#: Largest ``iterations`` (a search this long would run for weeks) and ``parallel``.
MAX_ITERATIONS = 10_000_000
MAX_PARALLEL = 64
#: ``seed`` range: input and proposer seeds derive from it with offsets, and torch and the
#: worker's generators take it as a signed 64-bit integer.
MAX_SEED = 2**31 - 1


class RunConfigError(ForgeError, ValueError):
    """A run setting out of range; refused before anything is created (exit code 2)."""

    exit_code = 2


@dataclass(frozen=True)
class RunConfig:
    """One search run as a person asks for it (``forge-tui run`` flags, the app's new-search form).

    Attributes:
        task: catalog task name, or a task file's path.
        iterations: proposals to evaluate.
        backend: ``auto``, ``cuda`` or ``host``.
        proposer: ``tune`` or ``llm``.
        seed: random seed of the search and of the correctness inputs.
        c: UCT exploration constant (speedup units).
        repairs: repair attempts for a failed LLM child.
        parallel: expansions in flight while the GPU times one more; None: the default for the
            proposer and backend (:func:`default_parallel`).
        model / base_url: the LLM endpoint (llm only); "" leaves it to the environment and the
            config file.
        seed_kernel: a kernel source file for the root node instead of the task's seed.
        profile: ``auto`` or ``off``: a hardware profile (ncu) of each ok node on cuda.
        mode: a task file's model in ``eval`` (default) or ``train`` mode (as constructed).
        precision: the fp32 matmul precision policy, one of :data:`PRECISION_CHOICES`.
        compile_workers / compile_ahead / compile_baseline: harness knobs no flag sets, read from
            a stored run's config (benchmarks of the harness write them there): compile threads
            (None: :func:`forge_tui.search.pipeline.default_compile_workers`), one more
            expansion while the worker evaluates, and timing the torch.compile baseline.
    """

    task: str
    iterations: int = 50
    backend: str = AUTO
    proposer: str = ProposerName.TUNE
    seed: int = 0
    c: float = 1.0
    repairs: int = 2
    parallel: Optional[int] = None
    model: str = ""
    base_url: str = ""
    seed_kernel: Optional[str] = None
    profile: str = AUTO
    mode: str = "eval"
    precision: str = DEFAULT_PRECISION
    compile_workers: Optional[int] = None
    compile_ahead: bool = True
    compile_baseline: bool = True

    @classmethod
    def from_stored(cls, config: Optional[Mapping[str, Any]], *, task: str = "") -> "RunConfig":
        """The settings a stored run's ``config`` (``RunRead.config``) holds, this class's defaults
        for those it lacks (a run stored before a setting existed reads as it did then).

        Read: ``repairs``, ``parallel``, ``precision`` (an unknown one reads as
        :data:`DEFAULT_PRECISION`), ``profile``, ``model``, ``base_url``, ``seed_kernel`` (the
        ``path`` of the stored ``{"path", "source"}``) and the harness knobs. The run's columns
        (task, iterations, backend, proposer, seed, c) are not in ``config``: ``task`` is given,
        the rest keep their defaults. ``config`` not a mapping reads as empty.
        """
        c: Mapping[str, Any] = config if isinstance(config, Mapping) else {}
        given: dict[str, Any] = {}
        if "repairs" in c:
            given["repairs"] = int(c["repairs"])
        if c.get("parallel") is not None:
            given["parallel"] = int(c["parallel"])
        if c.get("precision") in PRECISION_CHOICES:
            given["precision"] = c["precision"]
        for key in ("profile", "model", "base_url"):
            if isinstance(c.get(key), str):
                given[key] = c[key]
        seed_kernel = c.get("seed_kernel")
        if isinstance(seed_kernel, Mapping) and seed_kernel.get("path"):
            given["seed_kernel"] = str(seed_kernel["path"])
        if c.get("compile_workers"):
            given["compile_workers"] = int(c["compile_workers"])
        for key in ("compile_ahead", "compile_baseline"):
            if key in c:
                given[key] = bool(c[key])
        return cls(task=task, **given)

    def problem(self) -> Optional[str]:
        """One line naming a setting out of range, else None."""
        if self.backend not in BACKEND_CHOICES:
            return f"unknown backend {self.backend!r}: use {', '.join(BACKEND_CHOICES)}"
        if self.proposer not in PROPOSER_CHOICES:
            return f"unknown proposer {self.proposer!r}: use {' or '.join(PROPOSER_CHOICES)}"
        if self.profile not in PROFILE_CHOICES:
            return f"unknown profile setting {self.profile!r}: use {' or '.join(PROFILE_CHOICES)}"
        if self.precision not in PRECISION_CHOICES:
            return f"unknown precision {self.precision!r}: use {', '.join(PRECISION_CHOICES)}"
        return flag_problem(
            parallel=self.parallel, c=self.c, repairs=self.repairs, iterations=self.iterations, seed=self.seed
        )

    def check(self) -> "RunConfig":
        """``self``; raises RunConfigError naming the first setting out of range."""
        why = self.problem()
        if why:
            raise RunConfigError(why)
        return self


#: The defaults, for parsers and forms that show them.
DEFAULTS = RunConfig(task="")


def flag_problem(
    *,
    parallel: Optional[int] = None,
    c: Optional[float] = None,
    repairs: Optional[int] = None,
    iterations: Optional[int] = None,
    seed: Optional[int] = None,
) -> Optional[str]:
    """One line for a search setting out of range (named by its flag), else None; None skips a setting."""
    if parallel is not None and not 1 <= parallel <= MAX_PARALLEL:
        return f"--parallel must be between 1 and {MAX_PARALLEL}"
    if c is not None and not (math.isfinite(c) and c >= 0):
        return "--c (the UCT exploration constant) must be a finite number, 0 or more"
    if repairs is not None and repairs < 0:
        return "--repairs must be 0 or more"
    if iterations is not None and not 0 <= iterations <= MAX_ITERATIONS:
        return f"--iterations must be between 0 and {MAX_ITERATIONS:,}"
    if seed is not None and not 0 <= seed <= MAX_SEED:
        return f"--seed must be between 0 and {MAX_SEED}"
    return None


def run_precision(config: dict) -> str:
    """The fp32 matmul precision a stored run's ``config`` asks for (:data:`DEFAULT_PRECISION`
    for a run stored before the setting existed)."""
    return RunConfig.from_stored(config).precision


def precision_on(backend: str, precision: str) -> tuple[str, str]:
    """``(the fp32 matmul precision a run on backend is judged and timed under, a note)``.

    ``--precision`` exists to judge TF32 (``high``) and bf16 (``medium``) GPU kernels against
    a PyTorch that runs the same arithmetic. A backend without such modes
    (:attr:`forge_tui.core.backends.BackendFacts.matmul_precision_modes`: the host, whose g++
    kernels are plain fp32) runs under :data:`DEFAULT_PRECISION` whatever is asked: the
    looser fp32 tolerance of ``high`` (20x) would only let wrong host kernels pass. The note is
    one line saying so when another precision was asked (``""`` otherwise).

    Raises:
        UnknownBackendError: ``backend`` is neither ``cuda`` nor ``host``.
    """
    if precision == DEFAULT_PRECISION or backend_facts(backend).matmul_precision_modes:
        return precision, ""
    return DEFAULT_PRECISION, (
        f"--precision {precision} does not apply on the {backend} backend (its kernels have no TF32 or bf16 "
        f"matmul mode): judged and timed under {DEFAULT_PRECISION}, the fp32 tolerance"
    )


def default_parallel(proposer: str, backend: str) -> int:
    """``parallel`` when none is given, for a proposer and a *resolved* backend (cuda or host).

    llm: 2 requests in flight (a reply takes seconds to minutes; two keep the GPU busier
    without flooding the endpoint). tune on cuda: 4, since a tune search is compile-bound
    there (nvcc about 2 s per candidate against about 0.15 s of GPU evaluation on the H200,
    docs/benchmarks.md), and four compile threads give it about 3.7x the candidates per
    minute. tune on host: 1 (compiles never overlap a host evaluation; more would only make
    UCT decide with fewer results).
    """
    if proposer == ProposerName.LLM:
        return 2
    return 4 if backend == BackendName.CUDA else 1
