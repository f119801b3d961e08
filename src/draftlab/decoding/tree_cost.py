"""The cost-aware node budget (CaDDTree; docs/algorithms.md "Trees from the block"): how many nodes a round's tree
should have, from what a node is expected to add and what the verify pass costs on this machine.

A best-first tree's first n nodes are its most likely prefixes; node i's path probability under the lattice,
exp(score_i), is the chance it is accepted, so 1 + Φ(n) (Φ the summed path probability of nodes 1..n-1) is the
round's expected tokens. Adding the next node (probability δ) pays while
    (1 + Φ + δ) / (C_draft + C_verify(n + 1, ℓ))  >  (1 + Φ) / (C_draft + C_verify(n, ℓ)),
C_draft the draft pass and C_verify(n, ℓ) the verify pass of n nodes after ℓ tokens of context: `measure` times both
on the machine that runs (the tree pass at each compiled budget and two context lengths, `TreeCost`; the latency model
interpolates linearly between them, as CaDDTree's does). The round then verifies the smallest compiled budget that
holds the largest count of its streams (nodes past a stream's count are real, not padding: they cost nothing more).
The rule needs the grown tree's scores on the host: one more device-to-host copy per round, which the chain and the
fixed-budget trees do not make.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import torch
from torch import Tensor

from draftlab.decoding.tree import BUDGETS, TreeProposal
from draftlab.decoding.verify import SamplingParams

CONTEXTS = (128, 512)  # context lengths the verify pass is timed at (interpolated between, held outside)


@dataclass
class TreeCost:
    """Measured costs (ms) of one round's parts at one batch size."""

    draft_ms: float
    verify_ms: dict[int, dict[int, float]] = field(default_factory=dict)  # context -> {budget: ms}

    def verify(self, n: float, ctx: float) -> float:
        """C_verify(n, ℓ): linear in n between the timed budgets (the smallest budget's cost below it), linear in ℓ
        between the timed contexts (held at the nearest outside them)."""
        ctxs = sorted(self.verify_ms)
        at = [_interp(n, sorted(self.verify_ms[c]), [self.verify_ms[c][b] for b in sorted(self.verify_ms[c])])
              for c in ctxs]
        return _interp(ctx, ctxs, at)

    def to_dict(self) -> dict:
        return {"draft_ms": round(self.draft_ms, 3),
                "verify_ms": {str(c): {str(b): round(v, 3) for b, v in row.items()} for c, row in self.verify_ms.items()}}


def _interp(x: float, xs: list, ys: list) -> float:
    if x <= xs[0]:
        return ys[0]
    for (x0, y0), (x1, y1) in zip(zip(xs, ys), zip(xs[1:], ys[1:])):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return ys[-1] if len(xs) < 2 else ys[-1] + (ys[-1] - ys[-2]) * (x - xs[-1]) / (xs[-1] - xs[-2])


def budget(scores: list[float], cost: TreeCost, ctx: float) -> int:
    """The node count the rule keeps for one stream: scores = the grown tree's path log-probabilities, node order
    (index 0 the root; padding -inf)."""
    phi, n = 0.0, 1
    while n < len(scores):
        delta = float(torch.tensor(scores[n]).exp())
        if not delta > 0:
            break
        now = (1 + phi) / (cost.draft_ms + cost.verify(n, ctx))
        if (1 + phi + delta) / (cost.draft_ms + cost.verify(n + 1, ctx)) <= now:
            break
        phi, n = phi + delta, n + 1
    return n


def measure(target, drafter, batch: int = 1, contexts=CONTEXTS, budgets=BUDGETS, reps: int = 5, seed: int = 0) -> TreeCost:
    """Time the drafter's draft pass and the target's tree pass at each budget and context (median of `reps`, after
    one untimed call each), on random prompts, batch `batch`."""
    from draftlab.decoding.round import block_input, tap_ids, valid_positions
    from draftlab.decoding.tree import Tree
    from draftlab.verifier.streams import StreamCache, capacity_for

    g = torch.Generator().manual_seed(seed)
    dev = target.device
    sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)

    def timed(fn) -> float:
        fn()
        out = []
        for _ in range(reps):
            sync()
            t0 = time.perf_counter()
            fn()
            sync()
            out.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(out)

    cost = TreeCost(draft_ms=0.0)
    with torch.no_grad():
        for C in contexts:
            prompts = torch.randint(1, target.vocab_size, (batch, C), generator=g).tolist()
            sc = StreamCache(target, batch, capacity_for([C], 0, max(budgets)))
            pre = sc.prefill(prompts, 0, taps=tap_ids(drafter), last_logits_only=True)
            row = {}
            for n in budgets:  # a chain of n nodes: the pass's cost does not depend on the tree's shape
                ids = torch.randint(1, target.vocab_size, (batch, n), generator=g, device=dev)
                parent = torch.arange(-1, n - 1, device=dev).expand(batch, n)
                tree = Tree(ids, parent, torch.arange(n, device=dev).expand(batch, n),
                            torch.ones(batch, n, dtype=torch.bool, device=dev))
                anc = tree.ancestors()
                row[n] = timed(lambda: sc.append_tree(ids, anc, tree.depth, taps=tap_ids(drafter)))
            cost.verify_ms[C] = row
            if C == contexts[0] and drafter is not None:
                state = drafter.new_state(batch, sc.capacity)
                drafter.extend_context(state, pre.taps, sc.prompt_valid, valid_positions(sc.prompt_valid))
                last = torch.randint(1, target.vocab_size, (batch,), generator=g, device=dev)
                if hasattr(state, "start"):  # a state that tracks the committed text (a seeded drafter's)
                    state.start(prompts, last)
                pos = sc.next_pos[:, None] + torch.arange(drafter.block_size, device=dev)
                cost.draft_ms = timed(lambda: drafter.draft(state, block_input(drafter, state, last), pos))
    return cost


class CostAwareTree:
    """A ranking's tree (`TreeProposal` or a pair-ranked one) with the node budget chosen each round by the rule
    above, from `cost` (measured by `measure` on this machine). Tracks each stream's context length on the host."""

    def __init__(self, ranking: TreeProposal, cost: TreeCost):
        self.ranking, self.cost = ranking, cost
        self.ranking.nodes = max(BUDGETS)
        self.ctx: list[int] = []
        self.chosen: list[int] = []  # the budget verified each round (for the record)

    @property
    def k(self) -> int:
        return self.ranking.k

    def tree_nodes(self) -> tuple[int, ...]:
        return BUDGETS

    def start(self, prompts, first: Tensor) -> None:
        self.ctx = [len(p) for p in prompts]

    def extend(self, tokens: Tensor, counts: Tensor) -> None:
        self.ctx = [c + int(k) for c, k in zip(self.ctx, counts.tolist())]

    def drop_streams(self, keep: Tensor) -> None:
        self.ctx = [c for c, k in zip(self.ctx, keep.tolist()) if k]

    @torch.no_grad()
    def __call__(self, draft, sp: SamplingParams = SamplingParams(), generator: torch.Generator | None = None):
        from draftlab.decoding.api import Proposal

        tree = self.ranking.grow(draft, max(BUDGETS))
        scores = tree.score.float().cpu().tolist()  # the rule's host copy
        want = max(budget(s, self.cost, c) for s, c in zip(scores, self.ctx or [0] * len(scores)))
        n = next(b for b in BUDGETS if b >= want)
        self.chosen.append(n)
        t = tree.prefix(n)
        return Proposal(tokens=t.tokens[:, 1:], tree=t, extras={"tree_budget": torch.full((len(scores),), n)})
