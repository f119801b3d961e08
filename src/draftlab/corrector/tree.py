"""Trees ranked by a corrector's pair scores, DCOCO's or LiLiCorr's (docs/algorithms.md "Trees from the block"): the
same best-first tree as the marginal ranking (`draftlab.decoding.tree`), but a child's log-probability depends on its
parent's candidate.

DCOCO scores every transition between slot d's and slot d+1's top-K candidates, S_d(a, b) (`DCOCOCorrector.forward`,
[b, n-1, K, K]). The lattice row of parent a at slot d is softmax_b S_d(a, b) over the child slot's K candidates,
times the drafter's probability mass on those K (so a corrector that adds nothing, S_d(a, b) = the candidates'
logits, gives exactly the marginal tree; a row sums to that mass as a marginal row does); slot 1, whose parent is the
committed token, takes the drafter's marginals (LiLiCorr: its start scores, normalised the same way). A path's score is then a chain of conditionals, not a product of
independent marginals. Deterministic: at T>0 the round's walk draws from the target (lossless without q).
"""
from __future__ import annotations

import torch

from draftlab.corrector.base import ANCHOR, PAIR_ROWS, DraftBlock
from draftlab.decoding.tree import Lattice, TreeProposal, sort_rows
from draftlab.errors import DraftlabError


def pair_lattice(corrector, draft) -> Lattice:
    """The pair-ranked lattice of a drafted block: the corrector's K x K transition scores (`transition_rows`), one
    row per parent."""
    extra = getattr(draft, "extra_ids", None)
    anchor = getattr(draft, "anchor", None) if ANCHOR in corrector.contract.reads else None
    block = DraftBlock(hidden=draft.hidden[:, 1:], slot0=draft.block_ids[:, 0], vocab=draft.vocab,
                       logits=draft.logits[:, 1:], extra=None if extra is None else extra[:, 1:], anchor=anchor)
    ids, vals = block.candidates(corrector.arch.k)  # [b, n, K] target ids and draft logits, best first
    logp = vals.float() - block.full_logits().float().logsumexp(-1, keepdim=True)  # [b, n, K] marginal log-probs
    mass = logp.logsumexp(-1)  # [b, n] log of the drafter's mass on each slot's top-K
    start, scores = corrector.transition_rows(block)  # [b, K] or None, [b, n-1, K, K]
    rows = scores.float().log_softmax(-1) + mass[:, 1:, None, None]  # parent a at slot d -> its children at slot d+1
    K = ids.shape[-1]
    if start is None:  # slot 1: the committed token's children, by the drafter's marginals
        first = logp[:, :1, None, :].expand(-1, 1, K, -1)
    else:  # ... or by the corrector's own start scores, normalised the same way
        first = (start.float().log_softmax(-1) + mass[:, :1])[:, None, None, :].expand(-1, 1, K, -1)
    return sort_rows(torch.cat([first, rows], 1), ids)


class PairTreeProposal(TreeProposal):
    """A tree of `nodes` (a compiled budget) grown best first over a corrector's pair-ranked lattice."""

    ranking = "pair"

    def __init__(self, corrector, nodes: int, where: str = "the arm"):
        if PAIR_ROWS not in corrector.contract.offers:
            raise DraftlabError(f"{where}: a pair-ranked tree needs a DCOCO or LiLiCorr corrector (K x K transition "
                                f"scores); {type(corrector).__name__} has none — rank this tree by the block's "
                                f"marginals (dflash-tree{nodes}) instead")
        super().__init__(nodes, corrector.arch.k, where)
        self.corrector = corrector.eval()

    def lattice(self, draft) -> Lattice:
        if draft.logits is None or draft.hidden is None:
            raise DraftlabError("a pair-ranked tree needs the drafter's logits and hidden states (this round has none)")
        return pair_lattice(self.corrector, draft)
