"""The end-to-end total-variation objective (SPEC §3.3) and the first-rejection ablation.

Per drafted position the one-sample acceptance probability is the overlap
    α_{b,i} = Σ_v min(q_{b,i}(v), p_{b,i}(v)) = 1 − TV(q, p)        (full target vocabulary)
and per branch the expected-accepted-length proxy is Σ_{i=1..W_b} Π_{j≤i} α_{b,j}. The loss is

    L = 1 − (1/|B_valid|) Σ_b (1/W_b) Σ_{i≤W_b} Π_{j≤i} α_{b,j}

averaged over valid branches *globally*: `e2e_tv_terms` returns the numerator Σ_b (1 − …) and the
branch count, and the caller sums both across ranks before dividing. p and the sampled tokens are
fixed; gradients flow through q (inside α) and the prefix products only.
"""
from __future__ import annotations

import torch
from torch import Tensor

from draftlab.decoding.verify import greedy_accept_length
from draftlab.kernels.dispatch import tv_overlap


def overlap(q_logits: Tensor, p_logits: Tensor, vocab: Tensor | None = None, backend: str | None = None) -> Tensor:
    """α [...] for q_logits [..., Vq] (draft vocabulary `vocab` [Vq] or full) and p_logits [..., V]."""
    lead = q_logits.shape[:-1]
    a = tv_overlap(q_logits.reshape(-1, q_logits.shape[-1]), p_logits.reshape(-1, p_logits.shape[-1]), vocab, backend)
    return a.view(lead)


def e2e_tv_terms(alpha: Tensor, valid: Tensor) -> tuple[Tensor, Tensor]:
    """alpha [..., W], valid [..., W] bool (a prefix mask: positions 1..W_b) ->
    (numerator = Σ_b (1 − mean_i Π_{j≤i} α_j) over branches with W_b > 0, count of such branches)."""
    a = torch.where(valid, alpha, torch.ones_like(alpha))
    prefix = torch.cumprod(a, dim=-1) * valid  # [..., W]  Π_{j≤i} α_j, 0 beyond W_b
    W_b = valid.sum(-1)  # [...]
    has = W_b > 0
    per_branch = prefix.sum(-1) / W_b.clamp(min=1)  # (1/W_b) Σ_i Π_{j≤i} α_j
    numerator = torch.where(has, 1.0 - per_branch, torch.zeros_like(per_branch)).sum()
    return numerator, has.sum()


def e2e_tv_loss(alpha: Tensor, valid: Tensor) -> Tensor:
    """Single-process convenience: numerator / count."""
    num, cnt = e2e_tv_terms(alpha, valid)
    return num / cnt.clamp(min=1)


def first_rejection_mask(branch: Tensor, p_logits: Tensor, valid: Tensor) -> Tensor:
    """The ablation: keep positions up to and including the first one the target would reject
    (greedy rule, `greedy_accept_length`): branch [..., W] target ids, p_logits [..., W, V] -> [..., W]."""
    acc = greedy_accept_length(branch, p_logits.argmax(-1), valid)  # [...] accepted prefix length
    W = branch.shape[-1]
    return valid & (torch.arange(W, device=branch.device) <= acc[..., None])
