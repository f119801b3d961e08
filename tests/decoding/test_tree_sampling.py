"""Tree decoding at T>0 keeps the target's law jointly, and the chi-square harness that shows it has the power to
catch a biased rule.

A tiny random target (6 tokens) and a `FixedDrafter` whose block spreads its mass over a top-3 at every slot, grown
by `TreeProposal` into a 16- or 32-node tree with several siblings at depths 1, 2 and 3 (asserted). One prompt is
repeated over thousands of streams through the real engine (`SpeculativeEngine`: prefill, tree rounds with their
tree attention, `walk`, `keep_path`), and the joint law of the first three emitted tokens — the prefill's draw,
then the tree walk's tokens (and a second round's root draw when the first accepted nothing) — is compared by
Pearson chi-square with the exact joint, enumerated over all V^3 continuations from the target's own processed
distributions (`process_logits`, at T=1 and at T=0.7 with top-p 0.9). The same harness, fed the target's
logits at the tree's nodes, passes `tree.walk` and rejects the SpecInfer rule of recursive rejection sampling
(children visited in rank order, child x accepted with min(1, p_res(x)/q_res(x)), on rejection
p_res <- norm(max(0, p_res - q_res)) and q_res <- q_res without x, renormalised; when no child is accepted a draw
of p_res). That rule is exact only when the siblings are drawn i.i.d. from q (with replacement), because its
acceptance ratio p/q corrects for how often q *proposes* x. A deterministic top-K always proposes its best child
first, whatever q says: the first child is then emitted with probability min(1, p(x1)/q(x1)) (then never again,
since p_res(x1) = 0 afterwards), which is not p(x1) — e.g. p(x1) = 0.2, q(x1) = 0.57 emits x1 with probability
0.35 — and the error carries on through every sibling and depth. `walk` needs no q: each emitted token is one draw
of the target at the node reached, so it is exact for any tree.
"""
from __future__ import annotations

import pytest
import torch

from conftest import tiny_target
from draftlab.decoding import SamplingParams, SpeculativeEngine
from draftlab.decoding.tree import Tree, TreeProposal, grow, walk
from draftlab.decoding.verify import process_logits, sample
from draftlab.stats import chi_square_pvalue
from stubs import FixedDrafter

pytestmark = pytest.mark.usefixtures("one_thread")

V, K, PROMPT = 6, 3, [1, 2, 3]
STREAMS = 6000  # engine streams per case (one batch); the table-driven rules get TRIALS draws each
TRIALS = 20000
# the drafter's block (n = 3 slots, block_size 4): a top-3 of distinct tokens per slot holding most of q's mass
# (q(x1) ~ .57 at T=1, far above the target's nearly flat p, max ~ .4): siblings at every depth, a large bias
TABLE = torch.tensor([[3.0, 0.0, 2.0, 0.0, 1.5, 0.0],
                      [0.0, 3.0, 0.0, 2.0, 0.0, 1.5],
                      [1.5, 0.0, 0.0, 3.0, 2.0, 0.0]])
CASES = [pytest.param(SamplingParams(temperature=1.0), 32, 0, id="T1-tree32"),
         pytest.param(SamplingParams(temperature=0.7, top_p=0.9), 16, 1, id="T0.7-top_p0.9-tree16")]


@pytest.fixture(scope="module")
def target():
    return tiny_target("llama", vocab=V, layers=2, seed=0)  # at T=0.7, top-p 0.9 drops a token in every context


@pytest.fixture(scope="module")
def prefix_logits(target):
    """The target's logits after PROMPT + s, for every s of 0, 1 and 2 tokens: [V], [V, V], [V, V, V] (direct
    forwards of the full sequences, batched)."""
    with torch.no_grad():
        l0 = target(torch.tensor([PROMPT])).logits[0, -1]
        l1 = target(torch.tensor([PROMPT + [a] for a in range(V)])).logits[:, -1]
        l2 = target(torch.tensor([PROMPT + [a, b] for a in range(V) for b in range(V)])).logits[:, -1]
    return l0.float(), l1.float(), l2.float().reshape(V, V, V)


def exact_joint(logits, sp: SamplingParams) -> torch.Tensor:
    """[V^3] the target's law of its first three tokens, (t1, t2, t3) -> t1 * V^2 + t2 * V + t3."""
    p0, p1, p2 = (process_logits(x, sp).double() for x in logits)
    return (p0[:, None, None] * p1[:, :, None] * p2).flatten()


def top_p_margin(logits, sp: SamplingParams) -> float:
    """How far every context's top-p cut is from the threshold (the mass before each token minus top_p): a cut
    this far away lands on the same token whatever the machine's rounding, so zero cells stay zero."""
    flat = torch.cat([x.reshape(-1, V) for x in logits]) / sp.temperature
    p = flat.softmax(-1).sort(-1, descending=True).values
    return float(((p.cumsum(-1) - p) - sp.top_p).abs().min())


def check_law(tokens: torch.Tensor, joint: torch.Tensor, what: str) -> float:
    """Tally tokens [N, 3] and return the chi-square p-value against `joint`; no draw may land on a zero cell."""
    counts = torch.bincount(tokens[:, 0] * V * V + tokens[:, 1] * V + tokens[:, 2], minlength=V ** 3).double()
    assert counts[joint == 0].sum() == 0, f"{what}: a continuation the target gives no mass was emitted"
    return chi_square_pvalue(counts, joint)


def the_tree(nodes: int) -> Tree:
    """The tree every round grows from the drafter's block (its lattice does not depend on the root), root 0."""
    d = FixedDrafter(TABLE)
    block = torch.tensor([[0] + [d.mask_token_id] * TABLE.shape[0]])
    return grow(TreeProposal(nodes, k=K).lattice(d.draft(d.new_state(1), block, None)), block[:, 0], nodes)


def test_the_tree_has_siblings_at_every_depth():
    for nodes in (16, 32):
        tree = the_tree(nodes)
        assert bool(tree.valid.all())
        for d in (1, 2, 3):
            kids = torch.bincount(tree.parent[tree.depth == d], minlength=nodes)
            assert int(kids.max()) >= 2, f"tree{nodes}: no node with two children at depth {d}"


@pytest.mark.parametrize("sp, nodes, seed", CASES)
def test_engine_tree_rounds_keep_the_joint(target, prefix_logits, sp, nodes, seed):
    """The real engine, one prompt over STREAMS streams: the first three tokens' joint is the target's."""
    if sp.top_p < 1:
        assert top_p_margin(prefix_logits, sp) > 1e-4
    tree = the_tree(nodes)
    assert all(int(torch.bincount(tree.parent[tree.depth == d]).max()) >= 2 for d in (1, 2, 3))
    eng = SpeculativeEngine(target, FixedDrafter(TABLE), TreeProposal(nodes, k=K))
    res = eng.generate([PROMPT] * STREAMS, 3, sp, eos_ids=[], generator=torch.Generator().manual_seed(100 + seed))
    toks = torch.tensor([r[:3] for r in res.tokens])
    assert toks.shape == (STREAMS, 3)
    assert sum(a[0] > 0 for a in res.accepted) > STREAMS // 10  # the walk does accept tree nodes
    pv = check_law(toks, exact_joint(prefix_logits, sp), f"engine {sp}")
    print(f"engine {sp} tree{nodes}: p = {pv:.3g}")
    assert pv > 1e-3


# --- the same law through the tree's logits, with `walk` and with a biased rule -------------------------------------


def expand(tree: Tree, root: torch.Tensor) -> tuple[Tree, torch.Tensor]:
    """The one-row tree for every row of root [b] (node 0 = the row's root), and its ancestor matrix [b, N, N]."""
    b = root.shape[0]
    tokens = tree.tokens.expand(b, -1).clone()
    tokens[:, 0] = root
    big = Tree(tokens, tree.parent.expand(b, -1), tree.depth.expand(b, -1), tree.valid.expand(b, -1))
    return big, tree.ancestors().expand(b, -1, -1)


def node_logits(prefix_logits, ctx: torch.Tensor, tree: Tree) -> torch.Tensor:
    """[b, N, V] the target's logits at the tree's nodes after PROMPT + ctx (ctx [b, 1 or 2], its last token the
    root): the root's, and (ctx of one token) the depth-1 nodes'. Deeper nodes get zeros: their draws are never
    among the first three tokens."""
    _, l1, l2 = prefix_logits
    b, N = tree.tokens.shape
    out = torch.zeros(b, N, V)
    if ctx.shape[1] == 1:
        out[:, 0] = l1[ctx[:, 0]]
        one = tree.depth[0] == 1
        out[:, one] = l2[ctx[:, :1], tree.tokens[:, one]]
    else:
        out[:, 0] = l2[ctx[:, 0], ctx[:, 1]]
    return out


def tree_walk(logits, tree, anc, sp, g, q):
    """`tree.walk` as the round applies it: (accepted [b], committed tokens [b, D+1])."""
    w = walk(logits, tree, sp, g, anc, max_depth=q.shape[0])
    nxt = w.next_token[:, None]
    return w.accepted, torch.cat([w.tokens, nxt], 1).scatter(1, w.accepted[:, None], nxt)


def recursive_rejection(logits, tree, anc, sp, g, q):
    """SpecInfer's multi-draft rule over the tree's siblings (module doc), q [n, V] the drafter's law per slot:
    (accepted [b], committed tokens [b, n+1]). Biased on a deterministic top-K tree."""
    b, N, _ = logits.shape
    n = q.shape[0]
    rows = torch.arange(b)
    par = tree.parent[0]
    kids = [[c for c in range(N) if int(par[c]) == i] for i in range(N)]  # each node's children, in rank order
    most = max(len(k) for k in kids)
    kid_of = torch.tensor([k + [-1] * (most - len(k)) for k in kids])  # [N, most]
    cur = torch.zeros(b, dtype=torch.long)
    alive = torch.ones(b, dtype=torch.bool)
    acc = torch.zeros(b, dtype=torch.long)
    out = torch.zeros(b, n + 1, dtype=torch.long)
    for d in range(n + 1):
        pr = process_logits(logits[rows, cur], sp).double()  # the target at the current node
        qr = q[min(d, n - 1)].double().expand(b, -1).clone()
        chosen = torch.full((b,), -1, dtype=torch.long)
        for j in range(most):
            kid = kid_of[cur, j]  # [b]
            trying = alive & (chosen < 0) & (kid >= 0)
            x = tree.tokens[rows, kid.clamp(min=0)]
            px, qx = pr.gather(1, x[:, None])[:, 0], qr.gather(1, x[:, None])[:, 0]
            u = torch.rand(b, generator=g, dtype=torch.float64)
            ok = trying & (u * qx < px)  # u < min(1, p_res(x) / q_res(x))
            chosen = torch.where(ok, kid, chosen)
            rej = trying & ~ok
            resid = (pr - qr).clamp_min(0)
            mass = resid.sum(-1, keepdim=True)
            pr = torch.where(rej[:, None] & (mass > 0), resid / mass.clamp_min(1e-300), pr)
            qx_gone = qr.scatter(1, x[:, None], 0.0)
            qr = torch.where(rej[:, None], qx_gone / qx_gone.sum(-1, keepdim=True).clamp_min(1e-300), qr)
        took = alive & (chosen >= 0)
        tok = torch.where(took, tree.tokens[rows, chosen.clamp(min=0)], sample(pr, g))
        out[:, d] = torch.where(alive, tok, out[:, d])
        acc += took.long()
        cur = torch.where(took, chosen, cur)
        alive = took
    return acc, out


def three_tokens(rule, prefix_logits, tree: Tree, sp: SamplingParams, q, trials: int, g) -> torch.Tensor:
    """[trials, 3] the first three tokens of decoding with `rule` on every round's tree: the prefill's draw, round
    1 from it, and where round 1 accepted nothing, round 2's first token."""
    t1 = sample(process_logits(prefix_logits[0], sp).expand(trials, -1), g)
    big, anc = expand(tree, t1)
    acc, com = rule(node_logits(prefix_logits, t1[:, None], big), big, anc, sp, g, q)
    t2 = com[:, 0]
    big2, _ = expand(tree, t2)
    _, com2 = rule(node_logits(prefix_logits, torch.stack([t1, t2], 1), big2), big2, anc, sp, g, q)
    t3 = torch.where(acc >= 1, com[:, 1], com2[:, 0])
    return torch.stack([t1, t2, t3], 1)


@pytest.mark.parametrize("sp, nodes, seed", CASES)
def test_the_harness_passes_walk_and_rejects_recursive_rejection(prefix_logits, sp, nodes, seed):
    tree = the_tree(nodes)
    joint = exact_joint(prefix_logits, sp)
    q = process_logits(TABLE, SamplingParams(temperature=sp.temperature))  # the drafter's law: > 0 on every token
    pv = {}
    for name, rule in (("walk", tree_walk), ("recursive rejection", recursive_rejection)):
        g = torch.Generator().manual_seed(200 + seed)
        toks = three_tokens(rule, prefix_logits, tree, sp, q, TRIALS, g)
        pv[name] = chi_square_pvalue(
            torch.bincount(toks[:, 0] * V * V + toks[:, 1] * V + toks[:, 2], minlength=V ** 3).double(), joint)
        print(f"{name} {sp} tree{nodes}: p = {pv[name]:.3g}")
    assert pv["walk"] > 1e-3  # the harness is right: the failure below is the rule's
    assert pv["recursive rejection"] < 1e-6
