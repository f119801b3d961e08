"""The end-to-end total-variation objective (docs/algorithms.md "The E2E-TV loss") and the first-rejection ablation.

Per drafted position the one-sample acceptance probability at the sampling temperature T is the overlap
    α_{b,i} = Σ_v min(q^T_{b,i}(v), p^T_{b,i}(v)) = 1 − TV(q^T, p^T)      (full target vocabulary)
with q^T = softmax(q_logits / T) the distribution the branch token was drawn from and p^T =
softmax(p_logits / T) the target's at the same temperature (what the speculative-sampling test compares
at T; T = 1 is the paper's setting). Per branch the expected-accepted-length proxy is
Σ_{i=1..W_b} Π_{j≤i} α_{b,j}. The loss is

    L = 1 − (1/|B_valid|) Σ_b (1/W_b) Σ_{i≤W_b} Π_{j≤i} α_{b,j}

averaged over valid branches *globally*: `e2e_tv_terms` returns the numerator Σ_b (1 − …) and the
branch count, and the caller sums both across ranks before dividing. p and the sampled tokens are
fixed; gradients flow through q (inside α) and the prefix products only.

The first-rejection ablation (the comparison the paper left open) changes one thing: which positions
are supervised. `first_rejection_mask` keeps positions up to and including the first one the target
rejects under the rule that matches the sampling temperature (T > 0: the speculative-sampling test
u < p^T(y)/q^T(y) on the branch's own draws with seeded uniforms; T = 0: the greedy rule); the
branch keeps its full W_b in the 1/W_b weighting (`e2e_tv_terms(..., lengths=W_b)`).
"""
from __future__ import annotations

import torch
from torch import Tensor

from draftlab.decoding.verify import (
    SamplingParams, greedy_accept_length, process_logits, proposal_prob, sampling_accept_length,
)
from draftlab.kernels.dispatch import tv_overlap


def overlap(q_logits: Tensor, p_logits: Tensor, vocab: Tensor | None = None, backend: str | None = None,
            temperature: float = 1.0) -> Tensor:
    """α [...] at temperature T for q_logits [..., Vq] (draft vocabulary `vocab` [Vq] or full) and
    p_logits [..., V]: the overlap of softmax(q/T) and softmax(p/T)."""
    if temperature <= 0:
        raise ValueError(f"the E2E-TV overlap needs a sampling temperature > 0 (got {temperature})")
    if temperature != 1.0:
        q_logits, p_logits = q_logits / temperature, p_logits / temperature
    lead = q_logits.shape[:-1]
    a = tv_overlap(q_logits.reshape(-1, q_logits.shape[-1]), p_logits.reshape(-1, p_logits.shape[-1]), vocab, backend)
    return a.view(lead)


def expected_accept(alpha: Tensor, valid: Tensor) -> Tensor:
    """Σ_i Π_{j≤i} α_j over each branch's positions: alpha, valid [..., W] (valid a prefix mask) -> [...]."""
    a = torch.where(valid, alpha, torch.ones_like(alpha))
    return (torch.cumprod(a, dim=-1) * valid).sum(-1)  # Π_{j≤i} α_j, 0 beyond the last valid position


def e2e_tv_terms(alpha: Tensor, valid: Tensor, lengths: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """alpha [..., W], valid [..., W] bool (a prefix mask: the supervised positions) ->
    (numerator = Σ_b (1 − (1/W_b) Σ_{i supervised} Π_{j≤i} α_j) over branches with W_b > 0, their count).
    W_b = `lengths` [...] when given (the first-rejection ablation keeps each branch's full length), else
    the number of valid positions."""
    W_b = valid.sum(-1) if lengths is None else lengths
    has = W_b > 0
    per_branch = expected_accept(alpha, valid) / W_b.clamp(min=1)  # (1/W_b) Σ_i Π_{j≤i} α_j
    numerator = torch.where(has, 1.0 - per_branch, torch.zeros_like(per_branch)).sum()
    return numerator, has.sum()


def e2e_tv_loss(alpha: Tensor, valid: Tensor) -> Tensor:
    """Single-process convenience: numerator / count."""
    num, cnt = e2e_tv_terms(alpha, valid)
    return num / cnt.clamp(min=1)


def first_rejection_mask(branch: Tensor, p_logits: Tensor, valid: Tensor, temperature: float = 0.0,
                         q_logits: Tensor | None = None, vocab: Tensor | None = None, u: Tensor | None = None,
                         q_tok: Tensor | None = None, p_tok: Tensor | None = None) -> Tensor:
    """Positions up to and including the first one the target rejects, by the rule matching the sampling
    temperature: branch [..., W] target ids, p_logits [..., W, V], valid [..., W] -> [..., W] bool.
    T = 0: the greedy rule. T > 0: the speculative-sampling test (`sampling_accept_length`) of each drawn
    token with q_logits [..., W, Vq] (over `vocab`) and uniforms u [..., W] (the branch's own seeded stream);
    q_tok / p_tok [..., W] (q^T / p^T at each drawn token, computed chunk by chunk by the caller) replace
    q_logits / the softmax of p_logits."""
    if temperature <= 0:
        acc = greedy_accept_length(branch, p_logits.argmax(-1), valid)  # [...] accepted prefix length
    else:
        if (q_logits is None and q_tok is None) or u is None:
            raise ValueError("the sampling rule needs the branch's q_logits (or q_tok) and its uniforms u")
        sp = SamplingParams(temperature)
        if p_tok is None:
            p_tok = process_logits(p_logits, sp).gather(-1, branch[..., None]).squeeze(-1)  # [..., W]
        if q_tok is None:
            q_tok = proposal_prob(process_logits(q_logits, sp), branch, vocab)  # [..., W]
        acc = sampling_accept_length(p_tok, q_tok, u.to(p_tok), valid)
    W = branch.shape[-1]
    return valid & (torch.arange(W, device=branch.device) <= acc[..., None])
