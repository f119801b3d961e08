"""The corrector as the speculative engine's proposal step (SPEC §0, §2.2).

`CorrectorProposal(corrector, rule, lam, k, backend)` implements
`draftlab.decoding.speculative.ProposalStep`: called once per round with the drafter's
DraftOutput for the block (logits [B, S, Vd], hidden [B, S, H], vocab [Vd] | None, topk(K)), it
scores the n = S−1 proposed slots in one batched op and walks a path, returning
`Proposal(tokens [B, n] target ids, q=None)`. The proposal is deterministic at every temperature:
at T>0 the verifier applies the point-mass rule (accept with p_j(ŷ_j), on rejection resample from
p_j without ŷ_j), which keeps decoding lossless without any proposal distribution.

`SequentialProposal(corrector)` does the same for the sequential baselines (DSpark, Domino; SPEC §2.4):
a slot-by-slot walk from the block's slot-0 token (`draft.block_ids[:, 0]`, set by the engine).
"""
from __future__ import annotations

import torch

from draftlab.corrector.model import DCOCOCorrector
from draftlab.corrector.paths import RULES, path_tokens, select_path
from draftlab.corrector.sequential import SequentialCorrector
from draftlab.decoding.api import Proposal


class CorrectorProposal:
    def __init__(self, corrector: DCOCOCorrector, rule: str = "greedy", lam: float = 0.75, k: int | None = None,
                 backend: str | None = None):
        if rule not in RULES:
            raise ValueError(f"path rule {rule!r} is not valid; choose one of: {', '.join(RULES)}")
        self.corrector, self.rule, self.lam = corrector.eval(), rule, lam
        self.k = k or corrector.spec.k
        self.backend = backend  # None: DRAFTLAB_KERNELS, else Triton on CUDA / torch elsewhere
        self.last_indices: torch.Tensor | None = None  # [B, n] candidate indices of the last round

    @torch.no_grad()
    def __call__(self, draft, sp=None, generator: torch.Generator | None = None) -> Proposal:
        ids, logits = draft.topk(self.k)  # [B, S, K] target ids and draft logits, best first
        ids, logits = ids[:, 1:], logits[:, 1:]  # [B, n, K] the proposed slots
        scores = self.corrector(draft.hidden[:, 1:], ids, logits, self.backend)  # [B, n−1, K, K]
        idx = select_path(scores, logits, self.rule, self.lam, self.backend)  # [B, n]
        self.last_indices = idx
        # deterministic: point-mass verification at T>0; the grid is recorded for the explorer
        return Proposal(path_tokens(idx, ids), None, None,
                        extras={"transition_scores": scores, f"path_{self.rule}": idx})


class SequentialProposal:
    def __init__(self, corrector: SequentialCorrector):
        self.corrector = corrector.eval()

    @torch.no_grad()
    def __call__(self, draft, sp=None, generator: torch.Generator | None = None) -> Proposal:
        slot0 = draft.block_ids[:, 0]  # [B] the last committed token
        tokens = self.corrector.propose(draft.hidden[:, 1:], draft.logits[:, 1:], slot0, draft.vocab)  # [B, n]
        return Proposal(tokens, None, None)  # deterministic: point-mass verification at T>0
