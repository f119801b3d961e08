"""One update's objective for each arm of the SpecOPD comparison (plain torch; Lightning calls these).

All arms return `Terms` (numerator, count) so the caller can sum both across ranks before dividing;
α is the overlap at the sampling temperature T (`draftlab.specopd.loss.overlap`):
- `specopd_terms`: trunk pass -> drafter blocks at the anchors (q, with gradients) -> fresh
  branches sampled from q at T -> packed tree scoring (p) -> E2E-TV. `first_rejection=True` is the
  ablation supervising only up to and including the first position the target rejects under the rule
  matching T (the speculative-sampling test on the branch's own draws, uniforms from its own seeded
  stream), each branch keeping its full W_b in the weighting.
- `offpolicy_tv_terms`: the same loss on the reference continuation x_{a+1..a+W} (p = the trunk's
  own logits, no tree rows).
- `draft_opd_terms`: the Draft-OPD-style loop (`draft_opd.draft_opd_rollout`), then E2E-TV over
  its rounds.
(The off-policy CE baseline is pretraining's own step: `PretrainModule.training_step`.)
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from draftlab.decoding.verify import greedy_accept_length
from draftlab.specopd.loss import e2e_tv_terms, expected_accept, first_rejection_mask, overlap
from draftlab.specopd.draft_opd import draft_opd_rollout
from draftlab.specopd.tree import (
    ACCEPT_STREAM, branch_lengths, branch_target_logits, branch_uniforms, prefix_mask, reference_branches,
    sample_branches, trunk_pass,
)


@dataclass
class Terms:
    numerator: Tensor  # Σ over valid branches of (1 − (1/W_b) Σ_i Π_{j≤i} α_j); carries the gradient
    count: Tensor  # number of valid branches
    positions: int  # supervised draft positions
    mean_alpha: float  # mean overlap over supervised positions
    accept_prefix: float  # mean greedy-accepted prefix length of the branches (on-policy acceptance)
    expected_accept: float = 0.0  # Σ over branches of Σ_{i ≤ W_b} Π_{j≤i} α_j (all positions, the T=1 surrogate)


def block_q_logits(drafter, feats: Tensor, ctx_valid: Tensor, ids: Tensor, anchors: Tensor, W: int) -> Tensor:
    """Drafter logits of slots 1..W of the block at every anchor: [B, A, W, Vq] (with gradients)."""
    hidden = drafter.forward_train(feats, ctx_valid, ids, anchors)  # [B, A, S, H]
    return drafter.logits(hidden[:, :, 1:W + 1])


def _terms(q_logits: Tensor, p_logits: Tensor, branch: Tensor, valid: Tensor, vocab, backend,
           temperature: float = 1.0, supervised: Tensor | None = None) -> Terms:
    """valid [B, A, W]: the branches' positions (W_b); supervised: the positions the loss reads (default: all)."""
    alpha = overlap(q_logits, p_logits, vocab, backend, temperature)  # [B, A, W]
    sup = valid if supervised is None else supervised
    num, cnt = e2e_tv_terms(alpha, sup, valid.sum(-1))
    with torch.no_grad():
        n = int(sup.sum())
        acc = greedy_accept_length(branch, p_logits.argmax(-1), valid)  # [B, A]
        has = valid.any(-1)
        return Terms(num, cnt, n, float(alpha[sup].mean()) if n else float("nan"),
                     float(acc[has].float().mean()) if bool(has.any()) else float("nan"),
                     float(expected_accept(alpha.detach(), valid).sum()))


def specopd_terms(target, drafter, batch: dict, W: int, temperature: float = 1.0, seed: int = 0, step: int = 0,
                  first_rejection: bool = False, backend: str | None = None) -> Terms:
    """batch: ids [B, L] (right-padded references), seq_len [B], anchors [B, A], anchor_valid [B, A],
    seq [B] (sequence ids: key the branches' sampling streams)."""
    ids, seq_len, anchors = batch["ids"], batch["seq_len"], batch["anchors"]
    trunk = trunk_pass(target, ids, seq_len, drafter.target_layer_ids)  # K/V + taps + logits, once
    q_logits = block_q_logits(drafter, trunk.taps, trunk.valid, ids, anchors, W)  # [B, A, W, Vq]
    u = branch_uniforms(seed, step, batch["seq"].cpu(), anchors.cpu(), W)  # [B, A, W] per-branch streams
    branch = sample_branches(q_logits.detach(), u, temperature, drafter.draft_vocab)  # [B, A, W] fresh samples
    lengths = branch_lengths(anchors, batch["anchor_valid"], seq_len, W)  # [B, A] W_b
    valid = prefix_mask(lengths, W)  # [B, A, W]
    p_logits = branch_target_logits(target, trunk, anchors, branch, lengths)  # [B, A, W, V], no grad
    sup = None
    if first_rejection:  # the acceptance tests draw from the branch's own second stream
        ua = branch_uniforms(seed, step, batch["seq"].cpu(), anchors.cpu(), W, ACCEPT_STREAM)  # [B, A, W]
        sup = first_rejection_mask(branch, p_logits, valid, temperature, q_logits.detach(), drafter.draft_vocab, ua)
    return _terms(q_logits, p_logits, branch, valid, drafter.draft_vocab, backend, temperature, sup)


def offpolicy_tv_terms(target, drafter, batch: dict, W: int, backend: str | None = None,
                       temperature: float = 1.0) -> Terms:
    """E2E-TV on the reference tokens: p_{b,i} = trunk row a_b+i−1 (teacher forcing)."""
    ids, seq_len, anchors = batch["ids"], batch["seq_len"], batch["anchors"]
    trunk = trunk_pass(target, ids, seq_len, drafter.target_layer_ids)
    q_logits = block_q_logits(drafter, trunk.taps, trunk.valid, ids, anchors, W)
    branch = reference_branches(ids, anchors, W)  # [B, A, W]
    lengths = branch_lengths(anchors, batch["anchor_valid"], seq_len, W)
    valid = prefix_mask(lengths, W)
    L, V = trunk.logits.shape[1], trunk.logits.shape[2]
    rows = (anchors[..., None] + torch.arange(W, device=anchors.device)).clamp(max=L - 1)  # [B, A, W]
    p_logits = trunk.logits.gather(1, rows.flatten(1)[..., None].expand(-1, -1, V)).view(*rows.shape, V)
    return _terms(q_logits, p_logits, branch, valid, drafter.draft_vocab, backend, temperature)


def draft_opd_terms(target, drafter, batch: dict, W: int, rounds: int, temperature: float = 1.0, seed: int = 0,
                     step: int = 0, eos_ids: list[int] = (), backend: str | None = None) -> Terms:
    """Each sequence of the batch starts a stream at its first anchor (the reference prefix x_{≤a_0})."""
    keep = batch["anchor_valid"][:, 0].nonzero().squeeze(-1).tolist()
    ids, a0 = batch["ids"], batch["anchors"][:, 0]
    prefixes = [ids[b, : int(a0[b]) + 1].tolist() for b in keep]
    seq_ids = [int(batch["seq"][b]) for b in keep]
    ro = draft_opd_rollout(target, drafter, prefixes, rounds, W, temperature, seed, step, seq_ids, eos_ids)
    ctx_valid = torch.arange(ro.ids.shape[1], device=ro.ids.device)[None, :] < ro.seq_len[:, None]
    q_logits = block_q_logits(drafter, ro.feats, ctx_valid, ro.ids, ro.anchors, W)  # [B, R, W, Vq]
    valid = ro.anchor_valid[..., None].expand(-1, -1, W)
    return _terms(q_logits, ro.p_logits, ro.branch, valid, drafter.draft_vocab, backend, temperature)
