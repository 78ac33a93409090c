"""Confirmation: the best nodes of a finished search are measured again with fresh inputs.

The search's best is a maximum over noisy estimates, so it is biased upwards (the winner's
curse). The ``top`` nodes by search-time speedup are evaluated again, in full (correctness
and interleaved timing with new random inputs); each node keeps ``confirmed_speedup`` and
the run's best becomes the best confirmed node.
"""

from __future__ import annotations

from typing import Any, Callable

from forge_tui.core.status import NodeStatus
from forge_tui.evaluate.evaluator import Evaluator
from forge_tui.search import mcts
from forge_tui.search.gate import TimingGate


def confirm_best(
    tree: mcts.Tree,
    store: Any,
    evaluator: Evaluator,
    gate: TimingGate,
    run: Any,
    log: Callable[[str], None],
    top: int = 3,
) -> None:
    """Re-measure the ``top`` nodes of ``tree`` and record the confirmed figures and the run's best."""
    ranked = sorted(
        (n for n in tree.nodes.values() if n.reward and n.status == NodeStatus.OK),
        key=lambda n: n.reward or 0.0,
        reverse=True,
    )[:top]
    if not ranked:
        return
    best_id, best = None, 0.0
    for tn in ranked:
        node = store.get_node(tn.id)
        if node.confirmed_speedup is not None:
            value = node.confirmed_speedup
        else:
            with gate.timing():
                res = evaluator.evaluate(node.source, seed=run.seed * 1_000_003 + node.id + 500_009)
            ok = res.status == NodeStatus.OK
            value = res.speedup if ok and res.speedup else 0.0
            for m in res.measurements:
                m["method"] = "confirmation: " + m.get("method", "")
            store.confirm_node(
                node.id, value, res.measurements, note="" if ok else f"confirmation {res.status}: {res.error[:300]}"
            )
            log(f"confirmed node {node.id}: {value:.3f}x (search-time {tn.reward:.3f}x)")
        if value > best:
            best_id, best = node.id, value
    # a node confirmed by an earlier (resumed) run of this search stays a candidate for the best,
    # though it may no longer rank in the top by search-time speedup (the export takes it too)
    for summary in store.node_summaries(run.id):
        if summary.status == NodeStatus.OK and (summary.confirmed_speedup or 0.0) > best:
            best_id, best = summary.id, float(summary.confirmed_speedup)
    store.update_run(run.id, best_node_id=best_id, best_speedup=best or None, event_kind="confirmed")
