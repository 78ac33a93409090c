"""The search pipeline: several expansions in flight, compiles on CPU threads, one GPU.

With ``--parallel N``, up to N expansions are in flight ahead of the evaluation worker,
which times one more: N+1 at once in all (``compile_ahead`` off: N), of which at most N
wait on the proposer (N LLM requests at once). Each expansion goes

    select (UCT with virtual loss) -> propose -> store the node -> compile -> evaluate -> record

* Selection happens on the search thread. An expansion whose child does not exist yet holds
  a reservation on its parent (:meth:`Tree.reserve`), and a child being evaluated holds a
  virtual loss on its path, so the expansions in flight pick different leaves.
* Proposals of a slow proposer (``concurrent = True``: the LLM, seconds to minutes) run in
  threads, each on a snapshot of the tree; a cheap one (the tuner) runs inline on the search
  thread, where it sees every configuration already taken, so nothing is proposed twice.
* Compiles run on ``compile_workers`` CPU threads (the compiler is a subprocess). On the
  host backend the CPU is the device being timed, so compiles wait while an evaluation
  runs (the search's ``cpu_gate``, the same readers-writer gate as the local-LLM one): proposals
  still overlap everything, compiles overlap each other, never a timing.
* The evaluation worker (the GPU) evaluates exactly one candidate at a time, in the order
  the compiles finish, on its own thread.
* Every store write of the search happens on the search thread, in the order of the events
  it receives from the other threads; each is committed before the next starts. A proposer
  running in a thread writes its LLM exchange through the same :class:`SerialStore` lock.
  A node is stored as soon as its proposal exists, before it is compiled, so a process
  killed at any moment leaves only stored nodes in flight, and ``resume`` evaluates them
  again (statistics are derived from evaluated nodes, nothing counts twice).

Even at N=1 the pipeline compiles the next candidate while the worker evaluates the
current one: the next parent is selected with the current candidate's virtual loss
instead of its result, which costs UCT one result of hindsight and saves the compile
time of every iteration on the GPU's critical path.

Stop, SIGTERM and an unavailable proposer stop new expansions and let the stored nodes in
flight finish (proposals still waiting on the model are abandoned); a pause request lets
everything in flight finish, then waits. A lost lease returns at once without writing.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Protocol, Union

from forge_tui.core.results import EvalResult
from forge_tui.core.status import EXHAUSTED_REASON, REPAIRABLE, NodeKind, NodeStatus, RunStatus
from forge_tui.search import mcts
from forge_tui.search.control import PAUSE, Verdict
from forge_tui.search.proposers.base import Proposal, Proposer, ProposerUnavailable, SearchContext, source_hash
from forge_tui.search.stages import StageClock


def usable_cores() -> int:
    """CPU cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def default_compile_workers(parallel: int) -> int:
    """Compile threads for ``parallel`` expansions: one per expansion, bounded by the cores
    less one (the evaluation worker needs a core to itself to time without interference)."""
    return max(1, min(parallel, usable_cores() - 1))


class SerialStore:
    """The store with every call made under one lock: writes from the search thread, the
    heartbeat and proposer threads are serialised in this process (SQLite would serialise
    them too, with waits; this keeps them short and ordered)."""

    def __init__(self, store: Any):
        self._store = store
        self._lock = threading.RLock()

    @property
    def raw(self) -> Any:
        return self._store

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if not callable(attr):
            return attr
        lock = self._lock

        def call(*args, **kwargs):
            with lock:
                return attr(*args, **kwargs)

        return call


@dataclass(eq=False)
class Job:
    """One expansion in flight.

    kind: :attr:`NodeKind.PROPOSAL` or :attr:`NodeKind.REPAIR`. parent_id: the node expanded (for a repair, the failed
    node). repairs: repairs made before this one in its chain. node_id: set once stored.
    reserved: holds a :meth:`Tree.reserve` on ``parent_id`` until the proposal arrives.
    """

    kind: NodeKind
    parent_id: int
    repairs: int = 0
    clock: StageClock = field(default_factory=StageClock)
    node_id: Optional[int] = None
    source: str = ""
    compiled: Any = None
    reserved: bool = False


class SearchHost(Protocol):
    """What the pipeline needs from the search that drives it (:class:`~forge_tui.search.runner.Search`).

    Every store write goes through these methods, on the search thread; the pipeline's
    other threads use only ``proposer``, :meth:`compile_node` and :meth:`run_on_worker`: the
    node-evaluation steps the search's own synchronous evaluation (seed, repairs, nodes left in
    flight) runs in turn, so both evaluate a node one way.
    """

    tree: mcts.Tree
    tried: set[str]
    proposer: Proposer
    lease_lost: threading.Event

    def get_node(self, node_id: int) -> Any:
        """The stored node (a ``NodeRead``)."""

    def iterations_done(self) -> int:
        """Evaluated non-root nodes: the run's progress towards its target."""

    def iterations_target(self) -> int:
        """The run's iteration target."""

    def repair_budget(self) -> int:
        """Repair attempts a failed node gets (its chain of repairs included)."""

    def control_step(self) -> Verdict:
        """One look at the control requests without waiting: a final ``(status, reason)``,
        ``"pause"``, or None to go on (see :meth:`forge_tui.search.control.Control.step`)."""

    def wait_control(self) -> Optional[tuple[RunStatus, str]]:
        """Wait while paused; a final ``(status, reason)`` to stop with, or None once resumed."""

    def confirm_best(self) -> None:
        """Re-measure the best nodes before the run finishes (see :mod:`forge_tui.search.confirm`)."""

    def add_node(self, proposal: Proposal, parent: Any, clock: Optional[StageClock] = None) -> int:
        """Store a proposal as a pending node (or as a finished failed one), add it to the tree; its id."""

    def set_status(self, node_id: int, stage: str, clock: Optional[StageClock] = None) -> None:
        """Persist an in-flight stage of a node (once per change)."""

    def compile_node(self, source: str, clock: StageClock) -> tuple[Optional[EvalResult], Any]:
        """Static-check and compile a node's source behind the CPU gate (any thread, several at
        once): ``(verdict, None)`` when it never reaches the worker, else ``(None, compiled)``."""

    def run_on_worker(
        self, node_id: int, compiled: Any, clock: StageClock, on_stage: Callable[[str], None]
    ) -> EvalResult:
        """Evaluate a compiled candidate in the worker, behind the gates (any thread, one at a time)."""

    def finish(self, node_id: int, result: EvalResult, clock: Optional[StageClock] = None) -> None:
        """Record a node's result, its back-propagation and the run's counters in one transaction."""


# ---------------------------------------------------------------------- events (to the search thread)
@dataclass(frozen=True, eq=False)
class Proposed:
    """A proposal thread's proposal (None: nothing new below the parent)."""

    job: "Job"
    proposal: Optional[Proposal]
    parent: Any


@dataclass(frozen=True, eq=False)
class ProposeFailed:
    """A proposal thread raised (:class:`ProposerUnavailable` pauses the run; anything else is re-raised)."""

    job: "Job"
    error: BaseException


@dataclass(frozen=True, eq=False)
class StageBegan:
    """A node reached a stage, as the worker names it (``compiling``, ``verifying``, ``timing``;
    :meth:`SearchHost.set_status` persists only in-flight statuses)."""

    job: "Job"
    stage: str


@dataclass(frozen=True, eq=False)
class Evaluated:
    """A node's verdict: a compile failure, or the worker's result."""

    job: "Job"
    result: EvalResult


@dataclass(frozen=True, eq=False)
class Crashed:
    """A compile or worker thread raised: re-raised on the search thread."""

    job: "Job"
    error: BaseException


Event = Union[Proposed, ProposeFailed, StageBegan, Evaluated, Crashed]


class Pipeline:
    """Drives a run's iterations with expansions in flight (see the module docstring).

    Args:
        search: the search whose tree, store, proposer and evaluator are used (a :class:`SearchHost`).
        ctx: the search context proposers see (a snapshot of it for proposal threads).
        parallel: expansions in flight ahead of the evaluation worker (at least 1).
        compile_ahead: let one more expansion run while the worker evaluates (N+1 in all).
        compile_workers: compile threads (default :func:`default_compile_workers`).
    """

    def __init__(
        self,
        search: SearchHost,
        ctx: SearchContext,
        *,
        parallel: int = 1,
        compile_ahead: bool = True,
        compile_workers: Optional[int] = None,
    ):
        self.s, self.ctx = search, ctx
        self.parallel = max(1, int(parallel))
        self.capacity = self.parallel + (1 if compile_ahead else 0)
        self.compile_workers = max(1, int(compile_workers or default_compile_workers(self.parallel)))
        self.concurrent = bool(getattr(search.proposer, "concurrent", False))
        self.events: queue.Queue[Event] = queue.Queue()
        self.compile_q: queue.Queue = queue.Queue()
        self.gpu_q: queue.Queue = queue.Queue()
        self.jobs: list[Job] = []  # in flight, in launch order
        self.repairs: list[tuple[int, int]] = []  # (failed node, repairs made in its chain) waiting for a slot
        self.threads: list[threading.Thread] = []
        self.stopping: Optional[tuple[RunStatus, str]] = None
        self.exhausted = False

    # ------------------------------------------------------------------ main loop
    def run(self) -> tuple[RunStatus, str]:
        """Iterate to the run's target; returns the final ``(status, reason)``."""
        self._start_threads()
        lease_lost = False
        try:
            return self._loop()
        except KeyboardInterrupt:
            lease_lost = True  # do not wait for the evaluation in progress
            raise
        finally:
            self._stop_threads(wait=not lease_lost and not self.s.lease_lost.is_set())

    def _loop(self) -> tuple[RunStatus, str]:
        while True:
            if self.s.lease_lost.is_set():
                return RunStatus.INTERRUPTED, "another process took over this run's lease"  # no more writes
            paused = False
            if self.stopping is None:
                ctl = self.s.control_step()
                if ctl == PAUSE:
                    paused = True
                elif ctl is not None:
                    self.stopping = ctl
            if self.stopping is None and not paused:
                self._launch()
            if self.stopping is not None and not any(j.node_id is not None for j in self.jobs):
                return self.stopping  # proposals still waiting on the model are abandoned
            if not self.jobs:
                if paused:
                    ctl = self.s.wait_control()  # blocks until resumed or stopped
                    if ctl is not None:
                        return ctl
                    continue
                if self.s.iterations_done() >= self.s.iterations_target():
                    self.s.confirm_best()
                    return RunStatus.FINISHED, ""
                if self.exhausted:
                    self.s.confirm_best()  # a run that ends early is re-measured like one that runs out
                    return RunStatus.FINISHED, EXHAUSTED_REASON
            try:
                event = self.events.get(timeout=1.0)
            except queue.Empty:
                continue
            self._handle(event)

    def _launch(self) -> None:
        """Start expansions while a slot and the iteration budget allow."""
        s = self.s
        while len(self.jobs) < self.capacity and self.stopping is None:
            if s.iterations_done() + len(self.jobs) >= s.iterations_target():
                return
            if sum(1 for j in self.jobs if j.node_id is None) >= self.parallel:
                return  # N proposals under way already
            if self.repairs:
                failed_id, made = self.repairs.pop(0)
                job = Job(NodeKind.REPAIR, failed_id, repairs=made)
            else:
                parent_id = s.tree.select()
                if parent_id is None:
                    self.exhausted = not self.jobs and not self.repairs
                    return
                job = Job(NodeKind.PROPOSAL, parent_id)
            self.exhausted = False
            self.jobs.append(job)
            parent = s.get_node(job.parent_id)
            if self.concurrent:
                s.tree.reserve(job.parent_id)
                job.reserved = True
                ctx = dataclasses.replace(self.ctx, tree=s.tree.snapshot(), tried=set(s.tried))
                t = threading.Thread(
                    target=self._propose_thread, args=(job, ctx, parent), name=f"propose-{job.parent_id}", daemon=True
                )
                t.start()
            else:
                try:
                    with job.clock.stage("propose_s"):
                        proposal = self._propose(job, self.ctx, parent)
                except ProposerUnavailable as exc:
                    self.jobs.remove(job)
                    self.stopping = (RunStatus.PAUSED, str(exc).splitlines()[0])
                    return
                except BaseException:
                    self.jobs.remove(job)
                    raise
                self._proposed(job, proposal, parent)

    # ------------------------------------------------------------------ events (search thread)
    def _handle(self, event: Event) -> None:
        s = self.s
        job = event.job
        if isinstance(event, Proposed):
            self._proposed(job, event.proposal, event.parent)
        elif isinstance(event, ProposeFailed):
            self._release(job)
            self.jobs.remove(job)
            if isinstance(event.error, ProposerUnavailable):
                if self.stopping is None:
                    self.stopping = (RunStatus.PAUSED, str(event.error).splitlines()[0])
                return
            raise event.error
        elif isinstance(event, StageBegan):
            if job in self.jobs and job.node_id is not None:
                s.set_status(job.node_id, event.stage, job.clock)
        elif isinstance(event, Evaluated):
            assert job.node_id is not None  # only a stored node is evaluated
            s.tree.end(job.node_id)
            s.finish(job.node_id, event.result, job.clock)
            self.jobs.remove(job)
            self._queue_repair(job, event.result.status)
        elif isinstance(event, Crashed):
            raise event.error

    def _proposed(self, job: Job, proposal: Optional[Proposal], parent) -> None:
        s = self.s
        self._release(job)
        if proposal is None:
            s.tree.nodes[job.parent_id].exhausted = True
            self.jobs.remove(job)
            return
        if job.kind == NodeKind.REPAIR:
            proposal.kind = NodeKind.REPAIR
        if proposal.source and source_hash(proposal.source) in s.tried:
            # proposed in a thread while an identical source was stored: same verdict as the proposer's own check
            why = "the model returned a source identical to one already tried"
            proposal = Proposal(
                "",
                proposal.description or "duplicate proposal",
                kind=proposal.kind,
                exchange_id=proposal.exchange_id,
                failure=(NodeStatus.REJECTED, why),
            )
        node_id = s.add_node(proposal, parent, job.clock)
        job.node_id, job.source = node_id, proposal.source
        if proposal.failure:  # stored with its final status already
            self.jobs.remove(job)
            return
        s.tree.begin(node_id)
        job.clock.mark("compile_q")
        self.compile_q.put(job)

    def _release(self, job: Job) -> None:
        if job.reserved:
            self.s.tree.release(job.parent_id)
            job.reserved = False

    def _queue_repair(self, job: Job, status: str) -> None:
        """A failed node gets up to ``repairs`` repair expansions in a chain (the tuner none)."""
        made = job.repairs + (1 if job.kind == NodeKind.REPAIR else 0)
        if status in REPAIRABLE and made < self.s.repair_budget() and self.stopping is None:
            assert job.node_id is not None  # a finished node was stored
            self.repairs.append((job.node_id, made))

    # ------------------------------------------------------------------ other threads
    def _propose(self, job: Job, ctx: SearchContext, parent: Any) -> Optional[Proposal]:
        if job.kind == NodeKind.REPAIR:
            return self.s.proposer.repair(ctx, parent)
        return self.s.proposer.propose(ctx, parent)

    def _propose_thread(self, job: Job, ctx: SearchContext, parent: Any) -> None:
        try:
            with job.clock.stage("propose_s"):
                proposal = self._propose(job, ctx, parent)
        except BaseException as exc:  # noqa: BLE001 - handed to the search thread
            self.events.put(ProposeFailed(job, exc))
            return
        self.events.put(Proposed(job, proposal, parent))

    def _compile_thread(self) -> None:
        while True:
            job = self.compile_q.get()
            if job is None:
                return
            job.clock.wait_since("compile_q", "compile_q_s")
            self.events.put(StageBegan(job, NodeStatus.COMPILING))
            try:
                verdict, compiled = self.s.compile_node(job.source, job.clock)
            except BaseException as exc:  # noqa: BLE001
                self.events.put(Crashed(job, exc))
                continue
            if verdict is not None:
                self.events.put(Evaluated(job, verdict))
                continue
            job.compiled = compiled
            job.clock.mark("gpu_q")
            self.gpu_q.put(job)  # in the order compiles finish

    def _gpu_thread(self) -> None:
        s = self.s
        while True:
            job = self.gpu_q.get()
            if job is None:
                return
            job.clock.wait_since("gpu_q", "gpu_q_s")
            assert job.node_id is not None  # jobs reach the worker once stored

            def on_stage(st: str, j: Job = job) -> None:
                self.events.put(StageBegan(j, st))

            try:
                result = s.run_on_worker(job.node_id, job.compiled, job.clock, on_stage)
            except BaseException as exc:  # noqa: BLE001
                self.events.put(Crashed(job, exc))
                continue
            self.events.put(Evaluated(job, result))

    def _start_threads(self) -> None:
        for i in range(self.compile_workers):
            t = threading.Thread(target=self._compile_thread, name=f"compile-{i}", daemon=True)
            t.start()
            self.threads.append(t)
        t = threading.Thread(target=self._gpu_thread, name="gpu", daemon=True)
        t.start()
        self.threads.append(t)

    def _stop_threads(self, wait: bool) -> None:
        """Drain the queues and end the compile and GPU threads (waiting for the evaluation
        in progress unless ``wait`` is False); proposal threads are left to finish on their own."""
        for q in (self.compile_q, self.gpu_q):
            while True:
                try:
                    q.get_nowait()
                except queue.Empty:
                    break
        for _ in range(self.compile_workers):
            self.compile_q.put(None)
        self.gpu_q.put(None)
        if wait:
            for t in self.threads:
                t.join()
