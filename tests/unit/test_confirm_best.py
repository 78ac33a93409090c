"""The run's best after a confirmation is the best confirmed node of the whole run, including one
confirmed by an earlier (resumed) run that no longer ranks in the top by search-time speedup
(a fresh-user trial: `ls` said 0.255x while export took node 8 at 0.282x)."""

from __future__ import annotations

from forge_tui.core.status import NodeStatus
from forge_tui.search import mcts
from forge_tui.search.confirm import confirm_best
from store import Store


def test_a_node_confirmed_before_a_resume_stays_the_best(tmp_path):
    store = Store(tmp_path / "f.db")
    task = store.add_task(name="t", origin="catalog", reference_source="", spec={}, signature="", content_hash="h")
    run = store.create_run(task_id=task.id, task_name="t")
    tree = mcts.Tree()
    confirmed = {}
    for reward, conf in [(0.40, 0.255), (0.39, 0.20), (0.38, 0.10), (0.30, 0.282)]:
        node = store.add_node(run_id=run.id, status=NodeStatus.OK, source="k", speedup=reward)
        store.confirm_node(node.id, conf, [])
        tn = tree.add(node.id, None, NodeStatus.OK)
        tn.reward = reward
        confirmed[node.id] = conf

    class NoEvaluation:  # every ranked node is confirmed already: nothing is evaluated again
        def evaluate(self, *a, **k):
            raise AssertionError("no evaluation expected")

    confirm_best(tree, store, NoEvaluation(), None, run, log=lambda line: None, top=3)
    got = store.get_run(run.id)
    assert got.best_speedup == 0.282 and confirmed[got.best_node_id] == 0.282
