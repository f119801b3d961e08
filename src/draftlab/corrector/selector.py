"""DFlash-2's candidate selector as a co-trained corrector (`dflash2`), the project's own implementation
of the reference `dflash.model.CandidateSelector` (z-lab's `dflash` 0.1.0; same parameter names, so the
reference class loads these weights as they are; tests/corrector/test_selector.py checks the two agree).

Per slot p = 1..n, over the drafter's top-K candidates c_{p,k} (target ids) with draft logits ℓ_p(k):

    score_p(k) = ℓ_p(k) + < P[prev_p] ⊙ (W h_p), U[c_{p,k}] >

P (predecessor codebook) and U (successor codebook) are rank-r tables over target ids, W: H → r the
hidden projection; prev_1 = the block's slot-0 token, prev_{p+1} = the candidate chosen at p — a
sequential walk, like DSpark / Domino, that re-selects among the top-K like DCOCO. The successor
codebook is zero-initialised here, so the untrained selector returns the drafter's argmax block.

Differences from the reference, both deliberate: the `dflash2` arm proposes the argmax path at every temperature
(like the other correctors' point-mass arms, verified with the point-mass rule at T>0); `dflash2-sampled` samples
from softmax(score/T) over the K candidates and reports that q, as the reference does (`sample`); and candidates come from the drafter's draft
vocabulary when it has one (on a seeded drafter with the seed column, from it and each slot's seed column:
`extra`, `draftlab.corrector.base.drafter_block`). Training (the reference's recipe is not in the package):
decay-weighted cross-entropy over the K candidates of each slot under teacher forcing (prev = the previous label),
supervised where the target's token is among the top-K; the gradient reaches the drafter through ℓ.
Its settings (`corrector.families.dflash2`) and record (`FAMILY`) are at the end.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from draftlab.corrector.base import CorrectionLoss, draft_candidates
from draftlab.corrector.loss import transition_weights
from draftlab.corrector.family import ArmEntry, Family
from draftlab.corrector.sequential import (FORMAT, SequentialArch, SequentialCorrector, checked_load, sequential_arch,
                                           teacher_tokens, walk_cost)
from draftlab.corrector.variants import Variant
from draftlab.corrector.walks import SUFFIX as SAMPLED, SampledWalk, draw, reshaped
from draftlab.errors import ConfigError, DraftlabError


class CandidateSelector(SequentialCorrector):
    def __init__(self, arch: SequentialArch):
        super().__init__()
        self.arch, r = arch, arch.rank
        self.predecessor_codebook = nn.Embedding(arch.vocab_size, r)  # P
        self.successor_codebook = nn.Embedding(arch.vocab_size, r)  # U, zero-initialised
        self.hidden_projection = nn.Linear(arch.hidden_size, r, bias=False)  # W
        nn.init.zeros_(self.successor_codebook.weight)

    @property
    def top_k(self) -> int:
        return self.arch.top_k

    def scores(self, hidden: Tensor, unary: Tensor, cand: Tensor, prev: Tensor) -> Tensor:
        """hidden [*, H], unary [*, K] (draft logits of the candidates), cand [*, K] target ids, prev [*]
        -> score [*, K] fp32."""
        g = self.predecessor_codebook(prev.to(self.device)) * self.hidden_projection(hidden.to(self.dtype))  # [*, r]
        bias = (self.successor_codebook(cand.to(self.device)) * g[..., None, :]).sum(-1)  # [*, K]
        return unary.float() + bias.float()

    @torch.no_grad()
    def walk(self, hidden: Tensor, logits: Tensor, slot0: Tensor, vocab: Tensor | None = None,
             extra: Tensor | None = None) -> Tensor:
        """hidden [*, n, H], logits [*, n, Vd] ([*, n, Vd+1] with the seed column, extra [*, n] its target ids),
        slot0 [*] -> tokens [*, n] target ids (the argmax path)."""
        return self._pick_walk(hidden, logits, slot0, vocab, extra, lambda s, p: (s.argmax(-1), None))[0]

    @torch.no_grad()
    def sample(self, block, sp, u: Tensor) -> SampledWalk:
        """The sampled walk (`draftlab.corrector.walks`), as the reference samples: slot p from softmax(score_p/T) over
        its K candidates given the sampled predecessor; u [*, n]."""
        uu = u.reshape(-1, u.shape[-1])
        tokens, qs, cand = self._pick_walk(block.hidden, block.full_logits(), block.slot0, block.vocab, block.extra,
                                           lambda s, p: draw(s, sp, uu[:, p]))
        return reshaped(SampledWalk(tokens.reshape(uu.shape[0], -1), torch.stack(qs, 1), cand),
                        block.hidden.shape[:-2])

    def _pick_walk(self, hidden, logits, slot0, vocab, extra, pick) -> tuple[Tensor, list, Tensor]:
        """The walk over each slot's K candidates with `pick(score [N, K], p) -> (index [N], the row drawn from or
        None)` -> (tokens [*, n], the rows, the candidates [N, n, K] target ids)."""
        lead, (n, H) = hidden.shape[:-2], hidden.shape[-2:]
        cand, unary = draft_candidates(logits.reshape(-1, n, logits.shape[-1]), self.top_k, vocab,
                                       None if extra is None else extra.reshape(-1, n))  # [N, n, K]
        h = hidden.reshape(-1, n, H)
        prev, out, rows = slot0.reshape(-1), [], []
        for p in range(n):
            idx, row = pick(self.scores(h[:, p], unary[:, p], cand[:, p], prev), p)  # [N]
            prev = cand[:, p].gather(-1, idx[:, None])[:, 0]
            out.append(prev)
            rows.append(row)
        return torch.stack(out, -1).reshape(*lead, n), rows, cand

    def loss(self, block, labels: Tensor, valid: Tensor, draft_index: Tensor, rho: float,
             cumulative_mask: bool = False, kind: str = "joint") -> CorrectionLoss:
        """CE over each slot's K candidates (teacher-forced prev), w_p = exp(−(p−1)/ρ); a slot counts when
        its label is among the candidates. block.hidden [B, A, n, H], block.logits [B, A, n, Vd(+1)]. One loss
        only: `kind` must be `joint` (the `Corrector.loss` signature)."""
        if kind != "joint":
            raise DraftlabError(f"the candidate selector has one loss; loss kind {kind!r} needs the dcoco family")
        cand, unary = draft_candidates(block.full_logits(), self.top_k, block.vocab, block.extra)  # [B, A, n, K]
        prev = teacher_tokens(block.slot0, labels)  # [B, A, n]
        s = self.scores(block.hidden, unary, cand, prev)  # [B, A, n, K]
        hit = cand == labels[..., None]  # [B, A, n, K]
        mask = valid & hit.any(-1)  # [B, A, n]
        w = transition_weights(labels.shape[-1], rho, labels.device) * mask
        ce = F.cross_entropy(s.flatten(0, 2), hit.long().argmax(-1).flatten(), reduction="none").view_as(w)
        return CorrectionLoss((ce * w).sum(), w.sum(), mask, valid)


@dataclass
class DFlash2Config:
    """DFlash-2's selector's settings, `corrector.families.dflash2` (its K is `corrector.k`)."""

    rank: int = 64  # r: the codebooks' rank

    def check(self, p: str) -> None:
        if self.rank <= 0:
            raise ConfigError(f"{p}.rank={self.rank!r} must be > 0")


FAMILY = Family(
    name="dflash2", module=__name__, arch=SequentialArch, format=FORMAT, config=DFlash2Config, budget="main",
    corrector=CandidateSelector,
    build=lambda cfg, drafter, v, k: CandidateSelector(sequential_arch("dflash2", drafter, cfg.rank, top_k=k)),
    load=lambda arch, drafter: checked_load(arch, drafter, lambda a, d: CandidateSelector(a)),
    cost=lambda cfg, s: walk_cost("dflash2", cfg.rank, True, s),
    variants=(Variant("dflash2", "dflash2"),),  # DFlash-2's candidate selector
    arms={"dflash2": {"": ArmEntry("dflash2", colour="#393b79"), SAMPLED: ArmEntry("dflash2", walk=SAMPLED)}})
