"""The node steps of a search: storing proposals, persisting stages, evaluating and recording
results on the search thread. :class:`NodeSteps` is a mixin of :class:`forge_tui.search.runner.Search`,
which sets the attributes declared here in its ``__init__``."""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any, Callable, Optional

from forge_tui.core.config import RunConfig
from forge_tui.core.results import EvalResult
from forge_tui.core.status import FINAL, IN_FLIGHT, REPAIRABLE, NodeKind, NodeStatus
from forge_tui.evaluate.evaluator import Evaluator
from forge_tui.search import mcts
from forge_tui.search.baseline import compile_speedup
from forge_tui.search.errors import SearchError
from forge_tui.search.gate import TimingGate
from forge_tui.search.pipeline import SerialStore
from forge_tui.search.proposers.base import Proposal, Proposer, SearchContext, source_hash
from forge_tui.search.proposers.tune import config_of
from forge_tui.search.stages import StageClock
from forge_tui.search.tasks import run_seed
from kernels.base import TaskSpec


class NodeSteps:
    """Steps on one node of the tree, each persisted through the store before the next."""

    store: SerialStore
    run_id: int
    run: Any
    task: TaskSpec
    proposer: Proposer
    evaluator: Optional[Evaluator]
    gate: TimingGate
    cpu_gate: TimingGate
    tree: mcts.Tree
    tried: set[str]
    records: list[dict]
    _status_seen: dict[int, str]
    log: Callable[[str], None]
    t_start: float
    elapsed_base: float

    def _config(self) -> RunConfig:
        """The run's stored settings, with the defaults for those it was stored without."""
        return RunConfig.from_stored(self.run.config)

    def iterations_done(self) -> int:
        """Evaluated non-root nodes: the run's progress towards its target."""
        return sum(1 for n in self.tree.nodes.values() if n.reward is not None and n.parent is not None)

    def repair_budget(self) -> int:
        """Repair attempts a failed node gets (the run's ``repairs``, default 2)."""
        return self._config().repairs

    def add_node(self, proposal: Proposal, parent: Any, clock: Optional[StageClock] = None) -> int:
        """Store a proposal as a pending node (or as a finished failed one) and add it to the tree."""
        clock = clock or StageClock()
        h = source_hash(proposal.source) if proposal.source else ""
        status = proposal.failure[0] if proposal.failure else NodeStatus.PENDING
        with clock.stage("store_s"):
            row = self.store.add_node(
                run_id=self.run_id,
                parent_id=parent.id if parent is not None else None,
                depth=(parent.depth + 1) if parent is not None else 0,
                kind=proposal.kind,
                status=NodeStatus.PENDING,
                source=proposal.source,
                source_hash=h,
                description=proposal.description[:2000],
                params_json=json.dumps(proposal.params),
                proposer=self.proposer.name,
                iteration=0 if parent is None else len(self.tree.nodes),
            )
            if proposal.exchange_id is not None:
                self.store.attach_llm_exchange(proposal.exchange_id, row.id)
        self.tree.add(row.id, row.parent_id)
        self.tried.add(h)
        if proposal.failure:
            self.finish(row.id, EvalResult(status, proposal.failure[1]), clock)
        return row.id

    def set_status(self, node_id: int, stage: str, clock: Optional[StageClock] = None) -> None:
        """Persist an in-flight stage (compiling, verifying, timing) once per change."""
        if stage not in IN_FLIGHT or self._status_seen.get(node_id) == stage:
            return
        self._status_seen[node_id] = stage
        with clock.stage("store_s") if clock is not None else contextlib.nullcontext():
            self.store.set_node_status(node_id, NodeStatus(stage))

    def compile_node(self, source: str, clock: StageClock) -> tuple[Optional[EvalResult], Any]:
        """Static-check and compile a node's source, behind the CPU gate (any thread, several at once).

        Returns ``(verdict, compiled)``: a verdict (``rejected``, ``compile_error``) when the
        source never reaches the worker, else None and the compiled candidate for
        :meth:`run_on_worker`. Adds the gate wait to ``gate_s`` and the compile to ``compile_s``.
        """
        assert self.evaluator is not None  # set by Search._drive_inner before any evaluation
        clock.mark("cgate")
        with self.cpu_gate.generation():
            clock.wait_since("cgate", "gate_s")
            with clock.stage("compile_s"):
                return self.evaluator.prepare(source)

    def run_on_worker(
        self, node_id: int, compiled: Any, clock: StageClock, on_stage: Callable[[str], None]
    ) -> EvalResult:
        """Evaluate a compiled candidate in the worker, behind the gates (any thread, one at a time)."""
        assert self.evaluator is not None  # set by Search._drive_inner before any evaluation
        clock.mark("gate")
        with self.gate.timing(), self.cpu_gate.timing():
            clock.wait_since("gate", "gate_s")
            with clock.stage("evaluate_s"):
                result = self.evaluator.run_compiled(
                    compiled, seed=self.run.seed * 1_000_003 + node_id, on_stage=on_stage
                )
        clock.worker = dict(result.worker_stages_s)
        if result.status == NodeStatus.OK:
            self._profile_later(node_id, compiled, result)
        return result

    _profiler: Any = None  # forge_tui.evaluate.profile.Profiler, made at the first ok node on cuda

    def _profile_later(self, node_id: int, compiled: Any, result: EvalResult) -> None:
        """Queue an ncu profile of an ok node's kernel (cuda; ``profile`` and ``$FORGE_PROFILE`` not ``off``).

        Off the critical path: one background thread, the fastest node first; the profile (or
        why there is none) is stored later with ``Store.set_node_profile``. Never fails the node.
        """
        from forge_tui.evaluate.profile import Profiler, profiling_enabled

        if not profiling_enabled(self.run.config, self.run.backend):
            return
        try:
            if self._profiler is None:
                assert self.evaluator is not None
                self._profiler = Profiler(
                    self.evaluator.task_ref, self.run.backend, self.store.set_node_profile, log=self.log
                )
            seed = self.run.seed * 1_000_003 + node_id
            self._profiler.submit(node_id, compiled.library, seed=seed, priority=result.speedup or 0.0)
        except Exception as exc:  # a profile is a bonus: never the node's failure
            self.log(f"node {node_id}: no profile queued: {type(exc).__name__}: {exc}")

    def finish(self, node_id: int, result: EvalResult, clock: Optional[StageClock] = None) -> None:
        """Record a node's result, its back-propagation and the run's counters in one transaction."""
        clock = clock or StageClock()
        ok = result.status == NodeStatus.OK
        reward = mcts.reward(result.status, result.speedup)
        path = self.tree.record(node_id, result.status, reward)
        best_id = self.tree.best_node()
        best = self.tree.nodes[best_id].reward if best_id is not None else None
        iterations = self.iterations_done()
        error = result.error
        if result.output_tail.strip() and not ok:
            error = f"{error}\n--- worker output ---\n{result.output_tail[-4000:]}"
        timings = clock.as_dict()
        fields = {
            "status": result.status,
            "error": error,
            "speedup": result.speedup if ok else None,
            "median_ms": result.median_ms,
            "shapes_json": json.dumps(result.shapes),
            "timings_json": json.dumps(timings),
        }
        if result.flags:
            fields["flags_json"] = json.dumps(result.flags)
        over_compile = compile_speedup(self.run.baseline_json, result)
        if over_compile is not None:
            fields["speedup_compile"] = over_compile
        with clock.stage("result_write_s"):
            self.store.finish_node(
                node_id,
                fields=fields,
                compile_log=result.compile,
                correctness=result.correctness,
                measurements=result.measurements,
                stats=self.tree.stats(path),
                run_fields={
                    "iterations_done": iterations,
                    "best_node_id": best_id,
                    "best_speedup": best,
                    "elapsed_s": self.elapsed_base + (time.monotonic() - self.t_start),
                },
            )
        self._status_seen.pop(node_id, None)
        self.records.append(
            {
                "node_id": node_id,
                "status": result.status,
                **timings,
                "result_write_s": round(clock.totals["result_write_s"], 6),
                "compiled_cached": bool(result.compile and result.compile.get("cached")),
                "compiler_s": (result.compile or {}).get("seconds"),
                "spans": list(clock.spans),
            }
        )
        shown = f"{result.speedup:.3f}x" if ok and result.speedup else result.status
        desc = self.store.get_node(node_id).description
        line = (
            f"[{iterations:>3}/{self.run.iterations_target}] node {node_id} {shown:>13}  "
            f"best {best or 0:.3f}x  {desc[:60]}"
        )
        if not ok:
            line += f"  ({result.error.splitlines()[0][:120] if result.error else ''})"
        self.log(line)

    # ------------------------------------------------------------------ steps on the search thread
    def _load_tree(self, ctx: SearchContext) -> None:
        """Rebuild the tree from the stored nodes; evaluate again those left in flight."""
        rows = self.store.nodes(self.run_id)
        pending = []
        for r in rows:
            self.tree.add(r.id, r.parent_id, r.status)
            self.tried.add(r.source_hash)
            if r.status in FINAL:
                self.tree.record(r.id, r.status, mcts.reward(r.status, r.speedup))
            else:
                pending.append(r.id)
        for node_id in pending:
            self.log(f"node {node_id} was in flight when the run stopped: evaluating it again")
            self.store.set_node_status(node_id, NodeStatus.PENDING)
            self._evaluate(node_id, ctx)

    def _seed_root(self, ctx: SearchContext) -> int:
        seed, where = run_seed(self.run, self.task)
        if seed is None:
            proposal = self.proposer.propose(ctx, None)
            if proposal is None:
                raise SearchError("the proposer produced no first kernel for a task without a seed", exit_code=1)
            proposal.kind = NodeKind.SEED
        else:
            proposal = Proposal(seed, f"seed kernel from {where}", config_of(seed), kind=NodeKind.SEED)
        node_id = self.add_node(proposal, None)
        self._evaluate(node_id, ctx)
        return node_id

    def _maybe_repair(self, ctx: SearchContext, node_id: int) -> bool:
        """Let the proposer repair a failed node (up to its attempt budget). True if it ended ok."""
        current = node_id
        for _ in range(self.repair_budget()):
            node = self.store.get_node(current)
            if node.status == NodeStatus.OK or node.status not in REPAIRABLE:
                return node.status == NodeStatus.OK
            if self.iterations_done() >= self.run.iterations_target and node.parent_id is not None:
                return False
            proposal = self.proposer.repair(ctx, node)
            if proposal is None:
                return False
            proposal.kind = NodeKind.REPAIR
            current = self.add_node(proposal, node)
            self._evaluate(current, ctx)
        return self.store.get_node(current).status == NodeStatus.OK

    def _evaluate(self, node_id: int, ctx: SearchContext, clock: Optional[StageClock] = None) -> None:
        """Evaluate one stored node now, on this thread (the seed, its repairs, nodes left in flight):
        the pipeline's steps (:meth:`compile_node`, :meth:`run_on_worker`, :meth:`finish`) in turn."""
        clock = clock or StageClock()
        node = self.store.get_node(node_id)
        if node.status in FINAL:
            return
        self.tree.begin(node_id)
        try:
            self.set_status(node_id, NodeStatus.COMPILING, clock)
            verdict, compiled = self.compile_node(node.source, clock)
            if verdict is None:
                verdict = self.run_on_worker(node_id, compiled, clock, lambda st: self.set_status(node_id, st, clock))
        finally:
            self.tree.end(node_id)
        self.finish(node_id, verdict, clock)
