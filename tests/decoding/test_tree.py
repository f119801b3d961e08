"""Trees from the block (`draftlab.decoding.tree`): the best-first heap keeps the most likely prefixes of its lattice
(checked against enumerating every path), greedy tree decoding equals AR token for token (fp32, ragged streams,
budgets 8 and 64, marginal and per-parent rankings, eager and compiled under a counting backend, each tree shape one
graph), padding nodes are never accepted even when they hold the very token the target emits next, and bad input
is one line. (The packed pass against per-path recompute: tests/verifier/test_tree_pass.py; the joint sampling law:
test_tree_sampling.py.)"""
from __future__ import annotations

import itertools

import pytest
import torch

from conftest import tiny_target
from draftlab.decoding import SamplingParams, SpeculativeEngine, generate_ar
from draftlab.decoding.tree import (BUDGETS, PAD, Tree, TreeProposal, grow, marginal_lattice, sort_rows, tree_nodes,
                                    walk)
from draftlab.errors import DraftlabError
from stubs import RankedOracle

pytestmark = pytest.mark.usefixtures("one_thread")


def pair_lattice(b: int, n: int, K: int, V: int, seed: int):
    """A lattice with one row per parent (a pair ranking's shape): log-softmax over the child slot's K candidates."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.stack([torch.randperm(V, generator=g)[:K] for _ in range(b * n)]).reshape(b, n, K)
    rows = torch.randn(b, n, K, K, generator=g)
    rows[:, 0] = rows[:, 0, :1]  # slot 1 has one parent: the committed token
    return sort_rows(rows.log_softmax(-1), ids)


def best_prefixes(lat, b: int, count: int) -> list[float]:
    """The `count` best path scores of stream b by enumerating every path of the lattice."""
    n, K = lat.ids.shape[1:]
    lp = lat.lp[b].gather(-1, lat.order[b].argsort(-1))  # [n, K(parent), K(child candidate)] unsorted
    out = []
    for L in range(1, n + 1):
        for path in itertools.product(range(K), repeat=L):
            s, a = 0.0, 0
            for d, c in enumerate(path):
                s, a = s + float(lp[d, a, c]), c
            out.append(s)
    return sorted(out, reverse=True)[:count]


@pytest.mark.parametrize("kind", ["marginal", "pair"])
def test_grow_keeps_the_most_likely_prefixes(kind):
    b, n, K, V = 2, 4, 3, 30
    if kind == "marginal":
        g = torch.Generator().manual_seed(1)
        logp = torch.randn(b, n, V, generator=g).log_softmax(-1).topk(K)
        lat = marginal_lattice(logp.indices, logp.values)
    else:
        lat = pair_lattice(b, n, K, V, seed=2)
    root = torch.tensor([5, 6])
    big = grow(lat, root, 32)
    for N in (8, 16):
        t = grow(lat, root, N)
        for key in ("tokens", "parent", "depth", "valid"):  # a smaller budget is a prefix of a larger one
            assert torch.equal(getattr(t, key), getattr(big, key)[:, :N])
        for s in range(b):
            got = sorted(t.score[s, 1:].tolist(), reverse=True)
            assert got == pytest.approx(best_prefixes(lat, s, N - 1), abs=1e-5)
    # every real node's parent is earlier and one level up; siblings hold distinct tokens
    for s in range(b):
        for i in range(1, 32):
            p = int(big.parent[s, i])
            assert 0 <= p < i and int(big.depth[s, i]) == int(big.depth[s, p]) + 1
        kids = {}
        for i in range(1, 32):
            kids.setdefault(int(big.parent[s, i]), []).append(int(big.tokens[s, i]))
        assert all(len(v) == len(set(v)) for v in kids.values())


def test_a_lattice_smaller_than_the_budget_is_padded():
    g = torch.Generator().manual_seed(3)
    logp = torch.randn(1, 2, 10, generator=g).log_softmax(-1).topk(2)
    t = grow(marginal_lattice(logp.indices, logp.values), torch.tensor([4]), 8)  # 2 + 4 real nodes below the root
    assert t.valid[0].tolist() == [True] * 7 + [False]
    assert int(t.tokens[0, 7]) == PAD and int(t.parent[0, 7]) == -1 and int(t.depth[0, 7]) == 0


class PairTree(TreeProposal):
    """A tree over a random per-parent lattice (the pair ranking's shape) around the draft's top-K ids."""

    ranking = "pair"

    def lattice(self, draft):
        ids, _ = draft.topk(self.k)
        b, S, K = ids.shape
        g = torch.Generator().manual_seed(int(ids.sum()))
        rows = torch.randn(b, S - 1, K, K, generator=g)
        rows[:, 0] = rows[:, 0, :1]
        return sort_rows(rows.log_softmax(-1), ids[:, 1:])


def prompts_of(t, lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(1, t.vocab_size, (n,), generator=g).tolist() for n in lengths]


@pytest.fixture(scope="module")
def target():
    return tiny_target("llama")


@pytest.fixture(scope="module")
def ragged(target):
    prompts = prompts_of(target, (5, 12, 8))
    return prompts, [generate_ar(target, [p], 14, eos_ids=[]).tokens[0] for p in prompts]


@pytest.mark.parametrize("nodes", [8, 64])
@pytest.mark.parametrize("ranking", [TreeProposal, PairTree])
def test_greedy_tree_decoding_equals_ar(target, ragged, nodes, ranking):
    prompts, want = ragged
    d = RankedOracle(target, block_size=5, seed=1, taps=(0, 2), check_feats=True)
    res = SpeculativeEngine(target, d, ranking(nodes, k=4)).generate(prompts, 14, eos_ids=[])
    assert res.tokens == want
    assert d.ctx_checked > 20 and d.max_ctx_err < 1e-4  # the drafter's context: the target's taps of the path taken
    assert max(max(a) for a in res.accepted) >= (2 if ranking is TreeProposal else 1)  # the trees were used


def test_trees_accept_what_the_chain_misses(target, ragged):
    """The true token sits at rank 1 or 2 of the draft in about half the slots: the chain of top-1 stops there, a tree
    of 32 nodes holds it."""
    prompts, want = ragged
    chain = SpeculativeEngine(target, RankedOracle(target, block_size=5, seed=1)).generate(prompts, 14, eos_ids=[])
    tree = SpeculativeEngine(target, RankedOracle(target, block_size=5, seed=1), TreeProposal(32, k=4)).generate(
        prompts, 14, eos_ids=[])
    assert chain.tokens == tree.tokens == want
    assert sum(map(len, tree.accepted)) < sum(map(len, chain.accepted))  # fewer rounds for the same tokens


def test_compiled_tree_rounds_equal_eager_with_one_graph_per_shape(target, ragged):
    from torch._dynamo.testing import CompileCounter

    prompts, want = ragged
    counter = CompileCounter()
    torch._dynamo.reset()
    target.compile_steps("on", backend=counter)
    try:
        for p, w in zip(prompts, want):  # one stream at a time: batch 1, one tree shape per budget
            res = SpeculativeEngine(target, RankedOracle(target, block_size=5, seed=1), TreeProposal(8, k=4)).generate(
                [p], 14, eos_ids=[])
            assert res.tokens[0] == w
        assert counter.frame_count == 1  # the tree pass of (batch 1, 8 nodes); prefills run eager
        res = SpeculativeEngine(target, RankedOracle(target, block_size=5, seed=1), PairTree(64, k=4)).generate(
            prompts, 14, eos_ids=[])
        assert res.tokens == want
    finally:
        target.compile_steps("off")
        torch._dynamo.reset()


class PaddedWithTheTruth(TreeProposal):
    """A tree whose real child holding the target's next token (and its subtree) is turned into padding, and whose
    padding all holds exactly that token with the root as its parent: the walk must accept nothing, every round."""

    def __init__(self, oracle: RankedOracle, nodes: int = 8):
        super().__init__(nodes, k=2)
        self.oracle = oracle

    def __call__(self, draft, sp=SamplingParams(), generator=None):
        prop = super().__call__(draft, sp, generator)
        t, truth = prop.tree, self.oracle.truth[:, :1]  # [b, 1] the target's greedy token after the root
        hit = t.valid & (t.depth == 1) & (t.tokens == truth)
        pad = (t.ancestors() & hit[:, None, :]).any(-1) | ~t.valid
        self.padded = getattr(self, "padded", 0) + int((pad & (t.tokens == truth)).sum())
        t.valid = ~pad
        t.tokens = torch.where(pad, truth, t.tokens)
        t.parent = torch.where(pad, torch.zeros_like(t.parent), t.parent)
        t.depth = torch.where(pad, torch.ones_like(t.depth), t.depth)
        return prop


def test_padding_with_the_next_token_is_never_accepted(target, ragged):
    prompts, want = ragged
    oracle = RankedOracle(target, block_size=5, seed=1, ranks=(0.0, 0.7))
    step = PaddedWithTheTruth(oracle)
    res = SpeculativeEngine(target, oracle, step).generate(prompts, 10, eos_ids=[])
    assert [r[:10] for r in res.tokens] == [w[:10] for w in want]
    assert all(a == 0 for acc in res.accepted for a in acc)
    assert step.padded > 27  # every round of every stream had the truth in its padding


def test_walk_reads_only_real_children():
    """At the walk level: a padding node holding the target's argmax, parent pointing at the root, is not taken."""
    V = 6
    logits = torch.zeros(1, 4, V)
    logits[0, 0, 3] = 5.0  # the target's token after the root: 3
    tree = Tree(tokens=torch.tensor([[1, 2, 4, 3]]), parent=torch.tensor([[-1, 0, 0, 0]]),
                depth=torch.tensor([[0, 1, 1, 1]]), valid=torch.tensor([[True, True, True, False]]))
    w = walk(logits, tree, SamplingParams())
    assert int(w.accepted) == 0 and int(w.next_token) == 3
    tree.valid[0, 3] = True  # the same node, real: taken
    assert int(walk(logits, tree, SamplingParams()).accepted) == 1


def test_bad_tree_input_is_one_line(target):
    with pytest.raises(DraftlabError, match=r"a tree of 12 nodes is not one of the compiled budgets") as e:
        TreeProposal(12)
    assert "\n" not in str(e.value)
    assert tree_nodes(TreeProposal(BUDGETS[0])) == (BUDGETS[0],) and tree_nodes(object()) == ()

    class NoTopK:  # a drafter-less arm's block: no draft logits to rank
        logits = None
        block_ids = torch.zeros(1, 4, dtype=torch.long)

    with pytest.raises(DraftlabError, match="a tree arm needs a drafter with a top-K") as e:
        TreeProposal(8)(NoTopK())
    assert "\n" not in str(e.value)


def test_a_compiled_run_declares_and_warms_its_tree_shapes(target, ragged):
    """`plan_graphs` counts one tree pass per (declared batch, budget) of a tree arm (and no chain widths for it);
    `prepare_run` compiles them before the run, so decoding compiles nothing more and equals eager."""
    from torch._dynamo.testing import CompileCounter

    from draftlab.arms.grammar import SpeculativeArm
    from draftlab.decoding.shapes import declare, plan_graphs, prepare_run

    prompts, want = ragged
    d = RankedOracle(target, block_size=5, seed=1)
    arm = SpeculativeArm("dflash-tree16", target, d, TreeProposal(16, k=4))
    shapes = declare(max(map(len, prompts)), 14, 16, [1, 3])
    plan = plan_graphs(shapes, [(arm, 3, 0.0)], target)
    assert plan.keys == {"tree_step": {(1, 16, (0,)), (3, 16, (0,))}}
    counter = CompileCounter()
    torch._dynamo.reset()
    target.compile_steps("on", backend=counter)
    try:
        record = prepare_run(target, shapes, [(arm, 3, 0.0)], max_graphs=8)
        assert record["graphs"] == {"tree_step": 2} and counter.frame_count == 2
        res = arm.generate(prompts, 14, SamplingParams(), [], None)
        assert res.tokens == want and counter.frame_count == 2  # every shape was declared and warmed
    finally:
        target.compile_steps("off")
        torch._dynamo.reset()


def test_the_cost_aware_rule_adds_nodes_while_they_pay():
    from draftlab.decoding.tree_cost import TreeCost, budget

    scores = [0.0] + [float(x) for x in torch.tensor([0.9, 0.5, 0.3, 0.1, 0.05] + [0.001] * 58).log()]
    flat = TreeCost(draft_ms=5.0, verify_ms={128: {8: 10.0, 16: 10.0, 32: 10.0, 64: 10.0}})
    assert budget(scores, flat, 128) == 64  # a GPU-like flat cost: every node with any chance pays
    steep = TreeCost(draft_ms=5.0, verify_ms={128: {8: 10.0, 16: 20.0, 32: 40.0, 64: 80.0}})
    n = budget(scores, steep, 128)
    assert n == 8  # below 8 nodes the pass costs the same; past it a node must carry > 1.25 ms of expected tokens
    assert budget(scores + [float("-inf")], flat, 128) == 64  # padding ends the tree
    two = TreeCost(draft_ms=5.0, verify_ms={128: {8: 10.0, 64: 10.0}, 512: {8: 10.0, 64: 80.0}})
    assert two.verify(36, 320) == pytest.approx((10.0 + 45.0) / 2)  # linear in nodes, then in context


def test_greedy_cost_aware_tree_equals_ar(target, ragged):
    from draftlab.decoding.tree_cost import CostAwareTree, measure

    prompts, want = ragged
    d = RankedOracle(target, block_size=5, seed=1)
    cost = measure(target, d, batch=3, contexts=(16, 32), reps=1)
    assert set(cost.verify_ms[16]) == set(BUDGETS) and cost.draft_ms > 0
    step = CostAwareTree(TreeProposal(64, k=4), cost)
    res = SpeculativeEngine(target, d, step).generate(prompts, 14, eos_ids=[])
    assert res.tokens == want and step.chosen and set(step.chosen) <= set(BUDGETS)


@pytest.mark.parametrize("seed", range(6))
def test_the_host_heap_and_the_device_heap_grow_the_same_tree(seed):
    """`grow` runs a binary heap on the host on the CPU and tensor ops on an accelerator: same nodes, same float32
    scores, ties (lattices rounded to one decimal) broken alike."""
    from draftlab.decoding.tree import grow_device, grow_host

    b, n, K = 3, 6, 4
    lat = pair_lattice(b, n, K, 50, seed) if seed % 2 else marginal_lattice(
        *reversed(torch.randn(b, n, 50, generator=torch.Generator().manual_seed(seed)).log_softmax(-1).topk(K)))
    if seed % 3 == 0:
        lat.lp = lat.lp.round(decimals=1)
    root = torch.tensor([1, 2, 3])
    for N in (8, 64):
        a, d = grow_host(lat, root, N), grow_device(lat, root, N)
        for key in ("tokens", "parent", "depth", "valid", "score"):
            assert torch.equal(getattr(a, key), getattr(d, key)), key
