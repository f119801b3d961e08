"""Co-training of the sequential baselines DSpark / Domino (SPEC §2.4) with their drafter.

`SeqCoTrainModule(CoTrainModule)` keeps everything of DCOCO's co-training (data, drafter loss,
optimiser groups, frozen backbone, validation, best state, resumable counters) and replaces the
corrector loss: L = L_drafter + λ_corr·L_seq, where L_seq is the decay-weighted cross-entropy of the
teacher-forced corrected logits ℓ_p + δ_p (draft vocabulary) against the target's greedy tokens
(`block_targets`), w_p = exp(−(p−1)/ρ), summed as Σ w CE / Σ w over the batch (den over ranks).
Teacher forcing: slot p's previous token is the label of slot p−1, slot 1's is the block's slot-0
token (the sequence token at the anchor). Labels outside the draft vocabulary, and invalid slots, are
skipped (weight 0) like the drafter loss does. The counters `transitions_supervised / _total` count
supervised / valid slots here. Validation walks the blocks slot by slot (`block_paths`).
"""
from __future__ import annotations

from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch import Tensor

from draftlab.corrector.loss import transition_weights
from draftlab.corrector.sequential import teacher_tokens
from draftlab.training.corrector import CoTrainModule
from draftlab.training.pretrain import block_targets, global_ratio


class SeqCoTrainModule(CoTrainModule):
    """Drafter + a sequential corrector, L = L_drafter + λ·L_seq (or λ·L_seq alone with a frozen drafter)."""

    def corrected_logits(self, batch: dict, hidden: Tensor, logits: Tensor, labels: Tensor) -> Tensor:
        """Teacher-forced ℓ + δ: hidden [B, A, n, H], logits [B, A, n, Vd], labels [B, A, n] -> [B, A, n, Vd]."""
        slot0 = batch["ids"].gather(1, batch["anchors"])  # [B, A]
        return logits + self.corrector(hidden, teacher_tokens(slot0, labels))

    def compute_losses(self, batch: dict) -> dict:
        """Both losses on one batch: {'loss', 'drafter', 'corrector', 'den_corr', 'mask', 'pair_valid'}."""
        with torch.no_grad() if self.frozen else nullcontext():
            d = self.drafter_step(batch, greedy=True)
        hidden, logits = d["hidden"][:, :, 1:], d["logits"]  # [B, A, n, H], [B, A, n, Vd]
        if self.frozen:
            hidden, logits = hidden.detach(), logits.detach()
        labels, valid = block_targets(batch, d["greedy"], self.drafter.block_size)  # [B, A, n]
        corrected = self.corrected_logits(batch, hidden, logits, labels)  # [B, A, n, Vd]
        didx = self.t2d[labels]  # [B, A, n] draft index, -1 outside the draft vocabulary
        mask = valid & (didx >= 0)  # [B, A, n]
        w = transition_weights(labels.shape[-1], self.ccfg.rho, labels.device) * mask  # [B, A, n]
        ce = F.cross_entropy(corrected.flatten(0, 2), didx.clamp(min=0).flatten(), reduction="none").view_as(w)
        den = w.sum()
        l_seq = global_ratio((ce * w).sum(), den)
        loss = self.ccfg.lambda_corr * l_seq if self.frozen else d["loss"] + self.ccfg.lambda_corr * l_seq
        return {"loss": loss, "drafter": d["loss"], "corrector": l_seq, "den_corr": den, "mask": mask,
                "pair_valid": valid}
