"""Distillation from the target's own next-token distribution, rebuilt from cached features.

The feature cache already holds the target's last-layer hidden state h_t (a tap) at every position,
so the target's distribution needs no extra target pass and no cached logits:
p_t = softmax(head(final_norm(h_t))) over the draft vocabulary. Slot k of a block anchored at a
predicts token a+k, which the target predicts from h_{a+k-1}; `TapTeacher.kl` gives
KL(p_target || q_drafter) per slot for the pretraining loss (`pretrain.kd_weight`).
"""
from __future__ import annotations

import torch
from torch import Tensor

from draftlab.errors import DraftlabError


class TapTeacher:
    """The target's distribution at the block's positions from the cached last-layer tap."""

    def __init__(self, norm_weight: Tensor, eps: float, tap_index: int, hidden_size: int):
        self.w, self.eps = norm_weight.detach().float(), eps
        self.lo, self.hi = tap_index * hidden_size, (tap_index + 1) * hidden_size  # the tap's slice of the features

    @torch.no_grad()
    def log_probs(self, drafter, feats: Tensor, anchors: Tensor, n: int = 0, rows: Tensor | None = None) -> Tensor:
        """feats [B, L, F] (L covers a+n-1), anchors [B, A] -> log p over the drafter's (draft) vocabulary
        for slots 1..n (n = 0: every proposed slot): [B, A, n, Vd], or [N, Vd] for the slots where the
        bool mask rows [B, A, n] is True (the head then runs on those rows only)."""
        return drafter.logits(self.hidden(drafter, feats, anchors, n, rows)).log_softmax(-1)

    def kl_rows(self, drafter, hidden: Tensor, logits: Tensor) -> Tensor:
        """KL(p_target || q_drafter) per row from the target's normalised hidden rows [N, H] (`hidden`) and
        the drafter's logits [N, Vd] -> [N] (one row chunk at a time in pretraining's chunked step)."""
        with torch.no_grad():
            lp = drafter.logits(hidden).log_softmax(-1)  # [N, Vd]
        return (lp.exp() * (lp - logits.log_softmax(-1))).sum(-1)

    @torch.no_grad()
    def hidden(self, drafter, feats: Tensor, anchors: Tensor, n: int = 0, rows: Tensor | None = None) -> Tensor:
        """The target's final-normed last-layer state at the block's positions: [B, A, n, H] or [N, H]."""
        B, L, _ = feats.shape
        n = n or drafter.block_size - 1
        pos = (anchors[..., None] + torch.arange(n, device=anchors.device)).clamp(max=L - 1)  # [B, A, n]
        h = feats[..., self.lo:self.hi].float()  # [B, L, H]
        h = h.gather(1, pos.reshape(B, -1, 1).expand(-1, -1, h.shape[-1])).view(*pos.shape, -1)  # [B, A, n, H]
        if rows is not None:
            h = h[rows]  # [N, H]
        return self.w.to(h.device) * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps))  # the target's final norm

    def kl(self, drafter, feats: Tensor, anchors: Tensor, logits: Tensor, rows: Tensor | None = None) -> Tensor:
        """KL(p_target || q_drafter) per slot: the drafter's logits [B, A, n, Vd] -> [B, A, n]; or, with
        the bool mask rows [B, A, n], its logits of those slots [N, Vd] -> [N]."""
        n = logits.shape[2] if rows is None else rows.shape[2]
        lp = self.log_probs(drafter, feats, anchors, n, rows)
        return (lp.exp() * (lp - logits.log_softmax(-1))).sum(-1)


def make_teacher(target, taps: list[int]) -> TapTeacher:
    """A TapTeacher from the target's final norm; the target's last layer must be one of the taps."""
    last = target.num_layers - 1
    if last not in taps:
        raise DraftlabError(f"pretrain.kd_weight > 0 reads the target's last layer ({last}) from the taps; add it to "
                            f"drafter.target_layer_ids (now {list(taps)})")
    norm = target.final_norm
    eps = float(getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6)))
    return TapTeacher(norm.weight, eps, list(taps).index(last), target.hidden_size)
