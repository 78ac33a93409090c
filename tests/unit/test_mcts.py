"""MCTS on synthetic trees (UCT, progressive widening, back-propagation, virtual loss,
exhaustion, rebuild from rows) and the tune proposer's parameter handling."""

from __future__ import annotations

import math
import random
from types import SimpleNamespace

import pytest

from forge_tui.search import mcts
from forge_tui.search.mcts import Tree, reward
from forge_tui.search.proposers import tune
from forge_tui.search.proposers.base import source_hash
from store.models import FINAL


def chain(statuses_rewards):
    """A tree built node by node: list of (id, parent, status, reward or None)."""
    t = Tree(c=1.0)
    for nid, parent, status, r in statuses_rewards:
        t.add(nid, parent)
        if r is not None:
            t.record(nid, status, r)
    return t


# ----------------------------------------------------------------------------- back-propagation
def test_record_backpropagates_visits_value_best_along_the_path():
    t = chain([(1, None, "ok", 1.0), (2, 1, "ok", 2.0), (3, 2, "ok", 3.0), (4, 1, "incorrect", 0.0)])
    assert (t.nodes[1].visits, t.nodes[1].value, t.nodes[1].best) == (4, 6.0, 3.0)
    assert (t.nodes[2].visits, t.nodes[2].value, t.nodes[2].best) == (2, 5.0, 3.0)
    assert (t.nodes[3].visits, t.nodes[3].value, t.nodes[3].best) == (1, 3.0, 3.0)
    assert (t.nodes[4].visits, t.nodes[4].value, t.nodes[4].best) == (1, 0.0, 0.0)
    assert t.nodes[2].mean == 2.5 and t.nodes[1].children == [2, 4]
    t.add(5, 3)
    path = t.record(5, "ok", 0.5)
    assert path == [5, 3, 2, 1]
    assert t.stats(path) == [(5, 1, 0.5, 0.5), (3, 2, 3.5, 3.0), (2, 3, 5.5, 3.0), (1, 5, 6.5, 3.0)]
    assert t.best_node() == 3 and t.best_path() == [1, 2, 3]


def test_a_node_is_never_counted_twice():
    t = chain([(1, None, "ok", 1.0)])
    with pytest.raises(ValueError):
        t.record(1, "ok", 1.0)
    assert t.nodes[1].visits == 1


def test_reward_is_speedup_for_ok_and_zero_otherwise():
    assert reward("ok", 1.7) == 1.7
    for status in FINAL:
        if status != "ok":
            assert reward(status, 3.0) == 0.0
    assert reward("ok", None) == 0.0
    assert reward("ok", float("nan")) == 0.0
    assert reward("ok", float("inf")) == 0.0


def test_best_node_ignores_unevaluated_and_zero():
    t = chain([(1, None, "ok", 0.0), (2, 1, "incorrect", 0.0)])
    t.add(3, 1)
    assert t.best_node() is None and t.best_path() == []


# ----------------------------------------------------------------------------- widening + UCT
def test_widen_limit_follows_sqrt_of_visits():
    t = Tree()
    n = mcts.TreeNode(1, None)
    for visits, limit in [(0, 1), (1, 1), (2, 2), (4, 2), (5, 3), (9, 3), (10, 4), (100, 10)]:
        n.visits = visits
        assert t.widen_limit(n) == math.ceil(mcts.PW_K * max(visits, 1) ** mcts.PW_ALPHA) == limit


def test_progressive_widening_deepens_instead_of_widening():
    t = chain([(1, None, "ok", 1.0)])
    assert t.select() == 1  # root, visits 1: may get its first child
    t.add(2, 1)
    t.record(2, "ok", 1.2)
    assert t.select() == 1  # visits 2 -> 2 children allowed
    t.add(3, 1)
    t.record(3, "ok", 1.1)
    # visits 3 -> limit 2 reached: descend by UCT into a child, which may widen
    sel = t.select()
    assert sel in (2, 3) and len(t.nodes[1].children) == 2
    # both children have one visit; the higher mean wins
    assert sel == 2


def test_uct_picks_the_argmax_of_mean_plus_exploration():
    t = Tree(c=0.5)
    t.add(1, None)
    t.record(1, "ok", 1.0)
    rewards = {2: [1.0, 1.0, 1.0, 1.0], 3: [1.3], 4: [0.2, 2.0]}
    nid = 10
    for child, rs in rewards.items():
        t.add(child, 1)
        t.record(child, "ok", rs[0])
        for r in rs[1:]:
            t.add(nid, child)
            t.record(nid, "ok", r)
            nid += 1
    root = t.nodes[1]
    assert len(root.children) <= t.widen_limit(root)  # 10 visits -> 4 allowed, 3 present
    t.nodes[1].exhausted = True  # force descent
    for c in (2, 3, 4):
        t.nodes[c].exhausted = False
    expect = {}
    for c in (2, 3, 4):
        ch = t.nodes[c]
        expect[c] = ch.value / ch.visits + 0.5 * math.sqrt(math.log(root.visits) / ch.visits)
        assert t.uct(root, ch) == pytest.approx(expect[c])
    best = max(expect, key=expect.get)
    # the chosen child widens itself (its own limit allows it) or descends further
    sel = t.select()
    path = []
    cur = sel
    while cur is not None:
        path.append(cur)
        cur = t.nodes[cur].parent
    assert best in path


def test_failed_nodes_are_never_selected_on_random_trees():
    rng = random.Random(1)
    for trial in range(200):
        t = Tree(c=rng.choice([0.1, 1.0, 3.0]))
        t.add(1, None)
        t.record(1, "ok", 1.0)
        for nid in range(2, rng.randint(3, 40)):
            parent = rng.choice(list(t.nodes))
            t.add(nid, parent)
            status = rng.choice(["ok", "ok", "ok", "incorrect", "timeout", "crashed", "suspect", "compile_error"])
            t.record(nid, status, rng.uniform(0.1, 3.0) if status == "ok" else 0.0)
            if rng.random() < 0.2:
                t.nodes[nid].exhausted = True
        for _ in range(3):
            sel = t.select()
            if sel is None:
                break
            node = t.nodes[sel]
            assert node.status == "ok", (trial, sel, node.status)
            assert not node.exhausted
            cur = node.parent
            while cur is not None:  # every ancestor on the way is ok as well
                assert t.nodes[cur].status == "ok"
                cur = t.nodes[cur].parent
            t.add(1000 + _, sel)
            t.record(1000 + _, "incorrect", 0.0)


def test_failed_root_is_never_expanded():
    t = chain([(1, None, "compile_error", 0.0)])
    assert t.select() is None
    assert Tree().select() is None  # empty tree


def test_failed_children_make_the_parent_widen_not_descend():
    t = chain([(1, None, "ok", 1.0), (2, 1, "incorrect", 0.0), (3, 1, "crashed", 0.0), (4, 1, "timeout", 0.0)])
    # visits 4 -> limit 2, 3 children, none expandable: the root is the only choice
    assert t.select() == 1


def test_virtual_loss_steers_a_parallel_selection_elsewhere():
    t = chain([(1, None, "ok", 1.0), (2, 1, "ok", 2.0), (3, 1, "ok", 2.0)])
    assert t.select() == 2  # tie: first child, which may widen
    t.add(20, 2)
    t.begin(20)  # evaluation in flight below 2
    assert [t.nodes[i].in_flight for i in (20, 2, 1, 3)] == [1, 1, 1, 0]
    root = t.nodes[1]
    assert t.uct(root, t.nodes[2]) < t.uct(root, t.nodes[3])
    assert t.select() == 3
    t.end(20)
    assert [t.nodes[i].in_flight for i in (20, 2, 1)] == [0, 0, 0]
    t.end(20)  # never negative
    assert t.nodes[1].in_flight == 0
    assert t.uct(root, t.nodes[20]) == math.inf  # unvisited and nothing in flight


def test_exhausted_nodes():
    t = chain([(1, None, "ok", 1.0), (2, 1, "ok", 1.5), (3, 1, "ok", 1.4)])
    t.nodes[1].exhausted = True
    assert t.select() == 2
    t.nodes[2].exhausted = True
    assert t.select() == 3
    t.nodes[3].exhausted = True
    assert t.select() is None


def _random_rows(rng, n):
    rows = [SimpleNamespace(id=1, parent_id=None, status="ok", speedup=1.0)]
    for nid in range(2, n + 1):
        parent = rng.choice([r for r in rows if r.status == "ok"]).id
        status = rng.choice(["ok", "ok", "incorrect", "timeout", "suspect", "pending", "timing"])
        speedup = rng.uniform(0.2, 4.0) if status in ("ok", "suspect") else None
        rows.append(SimpleNamespace(id=nid, parent_id=parent, status=status, speedup=speedup))
    return rows


def test_from_rows_equals_incremental_recording():
    rng = random.Random(7)
    for _ in range(50):
        rows = _random_rows(rng, rng.randint(1, 60))
        inc = Tree(1.3)
        for r in rows:
            inc.add(r.id, r.parent_id, r.status)
            if r.status in FINAL:
                inc.record(r.id, r.status, reward(r.status, r.speedup))
        rebuilt = Tree.from_rows(rows, c=1.3)
        assert rebuilt.root == inc.root == 1
        for r in rows:
            a, b = inc.nodes[r.id], rebuilt.nodes[r.id]
            assert (a.visits, a.value, a.best, a.children, a.reward) == (
                b.visits,
                b.value,
                b.best,
                b.children,
                b.reward,
            )
            if r.status not in FINAL:
                assert b.reward is None  # in flight: counted only through evaluated children
        evaluated = sum(1 for r in rows if r.status in FINAL)
        assert rebuilt.nodes[1].visits == evaluated
        assert rebuilt.nodes[1].value == pytest.approx(
            sum(reward(r.status, r.speedup) for r in rows if r.status in FINAL)
        )
        assert rebuilt.select() == inc.select()


def test_suspect_nodes_score_zero():
    rows = [
        SimpleNamespace(id=1, parent_id=None, status="ok", speedup=1.0),
        SimpleNamespace(id=2, parent_id=1, status="suspect", speedup=1000.0),
    ]
    t = Tree.from_rows(rows)
    assert t.nodes[1].best == 1.0 and t.best_node() == 1


# ----------------------------------------------------------------------------- tune
SRC = """// demo
// @tune BLOCK: 128, 256, 512
#define BLOCK 256
// @tune VEC: 1, 2, 4
#define VEC 1
// @tune ONLINE: 0, 1
#define ONLINE 0
int blockx = BLOCK; // BLOCKS is not BLOCK
#define BLOCKS 7
"""


def test_parse_params():
    ps = tune.parse_params(SRC)
    assert [(p.name, p.values, p.current) for p in ps] == [
        ("BLOCK", ("128", "256", "512"), "256"),
        ("VEC", ("1", "2", "4"), "1"),
        ("ONLINE", ("0", "1"), "0"),
    ]
    assert tune.space_size(ps) == 18
    assert tune.config_of(SRC) == {"BLOCK": "256", "VEC": "1", "ONLINE": "0"}


def test_parse_params_of_the_seeds(softmax_task):
    for backend in ("host", "cuda"):
        ps = tune.parse_params(softmax_task.seed_source(backend))
        assert ps, backend
        for p in ps:
            assert p.current in p.values, (backend, p)


def test_declaration_without_define_is_an_error():
    with pytest.raises(tune.TuneError):
        tune.parse_params("// @tune X: 1, 2\nint x;\n")


def test_apply_params_changes_only_the_named_define():
    out = tune.apply_params(SRC, {"BLOCK": "512", "ONLINE": "1"})
    assert tune.config_of(out) == {"BLOCK": "512", "VEC": "1", "ONLINE": "1"}
    assert "#define BLOCKS 7" in out and "int blockx = BLOCK;" in out
    assert out.count("\n") == SRC.count("\n")
    with pytest.raises(tune.TuneError):
        tune.apply_params(SRC, {"NOPE": "1"})


def test_neighbours_adjacent_first():
    near, far = tune.neighbours(tune.parse_params(SRC))
    assert {d for _, d in near} == {"BLOCK 256 -> 128", "BLOCK 256 -> 512", "VEC 1 -> 2", "ONLINE 0 -> 1"}
    assert {d for _, d in far} == {"VEC 1 -> 4"}


def test_propose_config_never_repeats_and_ends_with_none():
    rng = random.Random(3)
    tried = {source_hash(SRC)}
    seen_configs = [tune.config_of(SRC)]
    while True:
        found = tune.propose_config(SRC, tried, rng, source_hash)
        if found is None:
            break
        src, desc, params = found
        h = source_hash(src)
        assert h not in tried, desc
        assert desc.startswith("tune: ") and params == tune.config_of(src)
        assert params not in seen_configs
        # one or two parameters changed from the parent
        changed = sum(1 for k, v in params.items() if v != seen_configs[0][k])
        assert changed in (1, 2)
        tried.add(h)
        seen_configs.append(params)
    # singles: 2 + 2 + 1 = 5; pairs of moves on different parameters: 2*2 + 2*1 + 2*1 = 8
    assert len(seen_configs) - 1 == 13
    assert tune.propose_config(SRC, tried, rng, source_hash) is None


def test_propose_config_none_when_whole_space_tried():
    ps = tune.parse_params(SRC)
    tried = set()
    import itertools

    for combo in itertools.product(*[p.values for p in ps]):
        tried.add(source_hash(tune.apply_params(SRC, dict(zip([p.name for p in ps], combo)))))
    assert len(tried) == 18
    assert tune.propose_config(SRC, tried, random.Random(0), source_hash) is None


def test_propose_config_without_params_is_none():
    assert tune.propose_config("int x;", set(), random.Random(0), source_hash) is None


def test_propose_config_is_reproducible_for_a_seeded_rng():
    a = tune.propose_config(SRC, {source_hash(SRC)}, random.Random(5), source_hash)
    b = tune.propose_config(SRC, {source_hash(SRC)}, random.Random(5), source_hash)
    assert a == b


def test_tune_proposer_never_proposes_a_tried_source(softmax_task):
    from forge_tui.search.proposers.base import SearchContext
    from forge_tui.search.proposers.tune import TuneProposer

    seed = softmax_task.seed_source("host")
    t = Tree()
    t.add(1, None)
    t.record(1, "ok", 1.0)
    tried = {source_hash(seed)}
    ctx = SearchContext(store=None, run=None, task=softmax_task, backend="host", facts={}, tree=t, tried=tried, seed=0)
    parent = SimpleNamespace(id=1, source=seed)
    prop = TuneProposer()
    prop.check_seed(seed)
    n = 0
    while (p := prop.propose(ctx, parent)) is not None:
        h = source_hash(p.source)
        assert h not in tried
        tried.add(h)
        t.add(100 + n, 1)
        n += 1
    assert n >= 5
