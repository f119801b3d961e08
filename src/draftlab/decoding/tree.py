"""Trees from the block (docs/algorithms.md "Trees from the block"): a round verifies a tree of a parallel drafter's
candidates in one target pass instead of one chain.

- A **lattice** holds, for each of the block's n proposed slots, K candidate target ids, and the log-probability of
  each candidate given the candidate its parent holds: `lp[b, d, a, c]` = log P(slot d+1 holds candidate c | slot d
  holds candidate a), slot 0 being the committed token (one parent, a = 0). The block's marginals give the same row
  to every parent (`marginal_lattice`, DDTree); a corrector's pair scores give one row per parent
  (`draftlab.corrector.tree`). Each row is sorted best first (`order` maps rank -> candidate).
- **`grow`** builds the tree of N nodes best first, on the device with fixed shapes (no host copy, compilable): node
  0 is the committed token; a heap over the frontier pops the node whose path has the largest summed log-probability,
  then pushes its next sibling and its first child. The first n nodes of a grown tree are the n most likely
  prefixes under the lattice, so a smaller budget is a prefix of a larger one. When the lattice runs out of nodes
  the rest are **padding**: token -1 (an id the target never emits), `valid` False, parent -1 (never anyone's
  child), depth 0.
- **`walk`** judges the verified tree: at each node the target's own token — its argmax (T=0) or one sample from its
  distribution at that node after temperature / top-k / top-p (T>0) — and the walk moves to the child holding that
  token; the first node without such a child emits that token as the round's bonus. Every emitted token is the
  target's own draw in the context of the tokens before it, so the rule is lossless at any temperature without q.
  On a chain it is the point-mass rule of `verify.verify_block` (accept ŷ with p(ŷ), else a draw of p without ŷ).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from draftlab.decoding.verify import SamplingParams, process_logits, sample
from draftlab.errors import DraftlabError

BUDGETS = (8, 16, 32, 64)  # node budgets a tree round may verify (node 0 included): the compiled engine's tree widths
NEG = float("-inf")
OPTIONS = tuple(f"tree{n}" for n in BUDGETS) + ("treecost",)  # the arm grammar's tree options (`arms.grammar`)
PAD = -1  # a padding node's token: an id the target never emits (the pass embeds it as 0; `feed`)


def check_budget(n: int, where: str = "the arm") -> int:
    """A node budget from the fixed set, or one line naming it."""
    if n not in BUDGETS:
        raise DraftlabError(f"{where}: a tree of {n} nodes is not one of the compiled budgets {list(BUDGETS)}; pick one "
                            f"of those (e.g. dflash-tree32)")
    return n


def option_nodes(option: str) -> int:
    """The nodes a tree option grows: tree<N> -> N, treecost -> the largest budget (its rule keeps a prefix)."""
    return max(BUDGETS) if option == "treecost" else int(option[4:])


def tree_nodes(proposer) -> tuple[int, ...]:
    """The node budgets a proposal step's trees use (its `tree_nodes()`; () for a chain)."""
    fn = getattr(proposer, "tree_nodes", None)
    return tuple(fn()) if fn is not None else ()


@dataclass
class Lattice:
    ids: Tensor  # [b, n, K] candidate target ids of slots 1..n
    lp: Tensor  # [b, n, K, K] lp[:, d, a, r]: log-prob of the r-th best child of candidate a at slot d (slot 0: a=0)
    order: Tensor  # [b, n, K, K] order[:, d, a, r]: the candidate index (at slot d+1) of that child


@dataclass
class Tree:
    tokens: Tensor  # [b, N] target ids (node 0 = the last committed token; padding: PAD)
    parent: Tensor  # [b, N] long: the parent's node index (< own index); -1 for the root and padding
    depth: Tensor  # [b, N] long: 0 for the root (and padding), d for a node at slot d
    valid: Tensor  # [b, N] bool: False for padding
    score: Tensor | None = None  # [b, N] the path's summed log-probability under the lattice (root 0, padding -inf)

    def prefix(self, n: int) -> "Tree":
        """The first n nodes: the tree of budget n (a best-first tree's prefix is the smaller budget's tree)."""
        cut = lambda t: None if t is None else t[:, :n]  # noqa: E731
        return Tree(cut(self.tokens), cut(self.parent), cut(self.depth), cut(self.valid), cut(self.score))

    def feed(self) -> Tensor:
        """The ids the target pass embeds [b, N]: padding's -1 as 0 (its row is never read)."""
        return self.tokens.clamp(min=0)

    @property
    def nodes(self) -> int:
        return self.tokens.shape[1]

    def ancestors(self) -> Tensor:
        """[b, N, N] bool: anc[i, j] = node j is node i or one of its ancestors."""
        b, N = self.parent.shape
        idx = torch.arange(N, device=self.parent.device)
        up = self.parent[:, :, None] == idx[None, None, :]  # [b, N, N] one step up
        anc = up | torch.eye(N, dtype=torch.bool, device=up.device)[None]
        hops = 1
        while hops < N:  # closure by squaring: paths of up to 2 * hops steps
            anc = torch.bmm(anc.float(), anc.float()) > 0
            hops *= 2
        return anc


def sort_rows(lp: Tensor, ids: Tensor) -> Lattice:
    """Per-parent log-prob rows lp [b, n, K, K] (unsorted, over the child slot's candidates) -> the sorted lattice."""
    vals, order = lp.sort(-1, descending=True)
    return Lattice(ids, vals, order)


def marginal_lattice(ids: Tensor, logp: Tensor) -> Lattice:
    """The block's marginals as a lattice: ids [b, n, K] and their log-probabilities logp [b, n, K], best first; every
    parent gets the same row (DDTree's independent slots)."""
    b, n, K = ids.shape
    order = torch.arange(K, device=ids.device).expand(b, n, K, K)
    return Lattice(ids, logp[:, :, None, :].expand(b, n, K, K), order)


def draft_lattice(draft, k: int) -> Lattice:
    """The marginal lattice of a drafted block: the top-K of slots 1..n with their log-softmax over the draft's
    vocabulary (a seeded drafter's seed column included)."""
    ids, vals = draft.topk(k)  # [b, S, K] target ids and logits, best first
    logz = draft.logits.float().logsumexp(-1, keepdim=True)  # [b, S, 1]
    return marginal_lattice(ids[:, 1:], (vals.float() - logz)[:, 1:])


def grow(lat: Lattice, root: Tensor, N: int) -> Tree:
    """The N-node tree of the lattice's most likely prefixes (module doc), root [b] = the last committed token. On the
    CPU a heap on the host (`grow_host`: N - 1 pops of a binary heap instead of N - 1 rounds of ~20 tensor ops); on an
    accelerator the same pops as tensor ops on the device (`grow_device`: fixed shapes, no host copy, compilable).
    The two give the same tree (same float32 sums, ties to the lowest frontier slot)."""
    return grow_host(lat, root, N) if root.device.type == "cpu" else grow_device(lat, root, N)


def grow_host(lat: Lattice, root: Tensor, N: int) -> Tree:
    """`grow` with a binary heap on the host (the lattice's tensors read once)."""
    import heapq

    import numpy as np

    b, n, K = lat.ids.shape
    lp, order, ids = (x.detach().numpy() for x in (lat.lp.float(), lat.order, lat.ids))
    tok = np.full((b, N), PAD, dtype=np.int64)
    tok[:, 0] = root.numpy()
    parent = np.full((b, N), -1, dtype=np.int64)
    depth = np.zeros((b, N), dtype=np.int64)
    score = np.full((b, N), -np.inf, dtype=np.float32)
    score[:, 0] = 0.0
    for s in range(b):
        cand = [0] * N
        heap = [(-lp[s, 0, 0, 0], 0, 0, 0)]  # (-score, frontier slot, parent node, rank): slots as `grow_device`
        for i in range(1, N):
            if not heap:
                break
            neg, j, par, r = heapq.heappop(heap)
            pd, pc = depth[s, par], cand[par]
            c = int(order[s, pd, pc, r])
            tok[s, i], parent[s, i], depth[s, i], cand[i], score[s, i] = ids[s, pd, c], par, pd + 1, c, -neg
            if r + 1 < K:
                heapq.heappush(heap, (-(score[s, par] + lp[s, pd, pc, r + 1]), j, par, r + 1))
            if pd + 1 < n:
                heapq.heappush(heap, (-(np.float32(-neg) + lp[s, pd + 1, c, 0]), i, i, 0))
    t = lambda a: torch.from_numpy(a)  # noqa: E731
    return Tree(t(tok), t(parent), t(depth), t(parent >= 0) | (torch.arange(N) == 0), t(score))


def grow_device(lat: Lattice, root: Tensor, N: int) -> Tree:
    """`grow` as tensor ops on the lattice's device (module doc)."""
    b, n, K = lat.ids.shape
    dev = root.device
    rows = torch.arange(b, device=dev)
    tok = root[:, None].repeat(1, N)
    parent = torch.full((b, N), -1, dtype=torch.long, device=dev)
    depth = torch.zeros(b, N, dtype=torch.long, device=dev)
    cand = torch.zeros(b, N, dtype=torch.long, device=dev)
    score = torch.zeros(b, N, device=dev)
    valid = torch.zeros(b, N, dtype=torch.bool, device=dev)
    valid[:, 0] = True
    fs = torch.full((b, N), NEG, device=dev)  # the frontier: score, parent node, rank among the parent's children
    fp = torch.zeros(b, N, dtype=torch.long, device=dev)
    fr = torch.zeros(b, N, dtype=torch.long, device=dev)
    fs[:, 0] = lat.lp[:, 0, 0, 0]
    lp = lat.lp.reshape(b, -1)  # [b, n*K*K]: (d, a, r) -> d*K*K + a*K + r
    order = lat.order.reshape(b, -1)
    ids = lat.ids.reshape(b, -1)  # (d, c) -> d*K + c
    for i in range(1, N):
        j = fs.argmax(-1)  # [b] the best frontier entry
        s = fs[rows, j]
        ok = s > NEG
        par, r = fp[rows, j], fr[rows, j]
        pd, pc = depth[rows, par], cand[rows, par]  # the parent's slot and candidate
        at = pd * K * K + pc * K + r
        c = order[rows, at]  # the new node's candidate at slot pd + 1
        tok[:, i] = torch.where(ok, ids[rows, pd * K + c], PAD)
        parent[:, i] = torch.where(ok, par, -1)
        depth[:, i] = torch.where(ok, pd + 1, 0)
        cand[:, i] = c
        score[:, i] = s  # -inf for padding
        valid[:, i] = ok
        sib = ok & (r + 1 < K)  # the next sibling takes the popped entry's place
        fs[rows, j] = torch.where(sib, score[rows, par] + lp[rows, (at + 1).clamp(max=lp.shape[1] - 1)],
                                  torch.full_like(s, NEG))
        fr[rows, j] = r + 1
        kid = ok & (pd + 1 < n)  # the first child enters the fresh entry i
        fs[:, i] = torch.where(kid, s + lp[rows, ((pd + 1).clamp(max=n - 1) * K + c) * K], torch.full_like(s, NEG))
        fp[:, i] = i
        fr[:, i] = 0
    return Tree(tok, parent, depth, valid, score)


@dataclass
class Walk:
    path: Tensor  # [b, D+1] node index at each depth of the accepted path (root first; past `accepted`: the leaf)
    accepted: Tensor  # [b] long: accepted nodes below the root
    next_token: Tensor  # [b] the bonus: the target's token at the path's last node
    tokens: Tensor  # [b, D] the accepted path's tokens (depth 1..D; past `accepted`: the bonus)
    target_tokens: Tensor  # [b, N] the target's token at every node (argmax or sample)


def walk(logits: Tensor, tree: Tree, sp: SamplingParams, generator: torch.Generator | None = None,
         anc: Tensor | None = None, max_depth: int | None = None) -> Walk:
    """The acceptance walk (module doc) over the target's logits at the tree's nodes [b, N, V]. max_depth: the
    deepest node any tree of this shape can hold (default N - 1)."""
    b, N = tree.tokens.shape
    D = N - 1 if max_depth is None else max_depth
    y = logits.argmax(-1) if sp.greedy else sample(process_logits(logits, sp), generator)  # [b, N] the target's draws
    anc = tree.ancestors() if anc is None else anc
    par = tree.parent.clamp(min=0)
    # a node matches when it is real, has a parent, and holds the parent's draw; accepted when it and every ancestor
    # below the root match (siblings hold distinct tokens, so at most one node per depth is accepted)
    match = tree.valid & (tree.parent >= 0) & (tree.tokens == y.gather(1, par))
    match[:, 0] = True
    accepted = ~(anc & ~match[:, None, :]).any(-1)  # [b, N]
    deep = torch.where(accepted, tree.depth, torch.full_like(tree.depth, -1))
    acc = deep.max(-1).values  # [b]
    leaf = deep.argmax(-1)  # [b] the accepted node at depth acc (unique)
    on = anc[torch.arange(b, device=anc.device), leaf]  # [b, N] the leaf's path
    d = torch.arange(D + 1, device=anc.device)
    at = on[:, None, :] & (tree.depth[:, None, :] == d[None, :, None])  # [b, D+1, N]
    path = torch.where(at.any(-1), at.float().argmax(-1), leaf[:, None])  # [b, D+1]
    nxt = y.gather(1, leaf[:, None]).squeeze(1)
    toks = tree.tokens.gather(1, path[:, 1:])  # [b, D]
    toks = torch.where(d[None, 1:] <= acc[:, None], toks, nxt[:, None])
    return Walk(path, acc, nxt, toks, y)


class TreeProposal:
    """The marginal-ranked tree (DDTree) as a proposal step: the draft's top-K per slot, grown best first to
    `nodes` (a budget of `BUDGETS`). Returns a `Proposal` whose `tree` the round verifies."""

    ranking = "marginal"

    def __init__(self, nodes: int, k: int = 8, where: str = "the arm"):
        self.nodes, self.k = check_budget(nodes, where), k

    def lattice(self, draft) -> Lattice:
        if draft.logits is None:
            raise DraftlabError("a tree arm needs a drafter with a top-K (this arm has no draft logits)")
        return draft_lattice(draft, self.k)

    def tree_nodes(self) -> tuple[int, ...]:
        return (self.nodes,)

    def grow(self, draft, nodes: int | None = None) -> Tree:
        """The tree of `nodes` (default: the step's budget) over this draft's lattice."""
        return grow(self.lattice(draft), draft.block_ids[:, 0], nodes or self.nodes)

    @torch.no_grad()
    def __call__(self, draft, sp: SamplingParams = SamplingParams(), generator: torch.Generator | None = None):
        from draftlab.decoding.api import Proposal

        tree = self.grow(draft)
        return Proposal(tokens=tree.tokens[:, 1:], tree=tree)
