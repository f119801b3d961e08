"""DCOCO training loss (docs/algorithms.md "Training and co-training"): joint-softmax cross-entropy over the K²
transitions of each slot pair, supervised only where the verifier's tokens are inside the drafter's top-K.

For transition p (slots p, p+1; p = 1..n−1):
- labels (a*_p, b*_p): the verifier's argmax tokens at slots p and p+1 under teacher forcing, located
  among the slots' candidates (target ids);
- mask m_p = 1 only when a*_p ∈ top-K(slot p) and b*_p ∈ top-K(slot p+1) (and both slots are valid);
  otherwise the transition is dropped, not pushed down. `cumulative=True`: m_p = Π_{q≤p} m_q (stop
  supervising a block after its first masked transition);
- CE_p = logsumexp_{a,b} S_p(a, b) − S_p(a*_p, b*_p) (the joint softmax; training only, inference
  uses the raw S_p);
- w_p = exp(−(p−1)/ρ), ρ = 4;  L_corr = Σ w_p m_p CE_p / Σ w_p m_p over the whole batch.

Loss kinds (`kind`, an ablation; `joint` is the paper's and the default). The joint CE splits
into a row term (which of slot p's candidates is right) and a within-row term (slot p+1 given it); the
greedy walk only ever reads the rows it reaches:
- `joint`: the above;
- `cond`:  CE_p = logsumexp_b S_p(a*_p, b) − S_p(a*_p, b*_p), the within-row choice given the teacher's
  a*_p, same mask m_p;
- `reach`: the `cond` CE only on transitions whose row the prefix-first greedy walk reaches on the
  verifier's path: r_1 = [a*_1 is the drafter's top-1] (slot 1 keeps it), r_{p+1} = r_p ∧
  [argmax_b S_p(a*_p, b) = b*_p] (scores detached, ties to the lowest index like the walk);
  m_p ∧= r_p. A row the walk reaches after leaving the verifier's path is never read by an accepted prefix.

Distributed-safe: `num` = Σ w m CE and `den` = Σ w m are returned beside `loss`, so data-parallel
training can all-reduce both and divide once (a rank with no supervised transition contributes
0 / 0 without NaN).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from draftlab.corrector.variants import LOSSES


@dataclass
class CorrectorLoss:
    loss: Tensor  # [] num / den (0 when nothing is supervised)
    num: Tensor  # [] Σ_p w_p m_p CE_p
    den: Tensor  # [] Σ_p w_p m_p
    ce: Tensor  # [*, n−1] CE_p (0 where masked)
    mask: Tensor  # [*, n−1] bool m_p
    label_idx: Tensor  # [*, n] candidate index of each slot's label, −1 outside the top-K


def transition_weights(n_pairs: int, rho: float = 4.0, device=None) -> Tensor:
    """w_p = exp(−(p−1)/ρ) for p = 1..n−1 -> [n−1] fp32."""
    p = torch.arange(n_pairs, device=device, dtype=torch.float32)  # p − 1
    return torch.exp(-p / rho)


def label_indices(cand_ids: Tensor, labels: Tensor, valid: Tensor | None = None) -> Tensor:
    """Where each slot's label sits among its candidates: cand_ids [*, n, K], labels [*, n]
    -> [*, n] long in 0..K−1, or −1 when the label is outside the top-K (or the slot is invalid)."""
    hit = cand_ids == labels[..., None]  # [*, n, K]
    idx = torch.where(hit.any(-1), hit.long().argmax(-1), torch.full_like(labels, -1))  # [*, n]
    if valid is not None:
        idx = torch.where(valid, idx, torch.full_like(idx, -1))
    return idx


def reached_rows(scores: Tensor, a_star: Tensor, b_star: Tensor, first_is_top1: Tensor) -> Tensor:
    """Which transitions' rows the prefix-first greedy walk reaches while on the verifier's path:
    scores [*, n−1, K, K], a_star / b_star [*, n−1] candidate indices (−1 outside the top-K),
    first_is_top1 [*] bool (slot 1's label is the drafter's top-1) -> [*, n−1] bool r_p."""
    with torch.no_grad():
        row = scores.detach().gather(-2, a_star.clamp(min=0)[..., None, None].expand(
            *a_star.shape, 1, scores.shape[-1])).squeeze(-2)  # [*, n−1, K]  S_p(a*_p, ·)
        right = (row.argmax(-1) == b_star) & (a_star >= 0) & (b_star >= 0)  # [*, n−1] the walk picks b*_p
        steps = torch.cat([first_is_top1[..., None], right[..., :-1]], -1)  # [*, n−1]
        return steps.long().cumprod(-1).bool()


def corrector_loss(scores: Tensor, cand_ids: Tensor, labels: Tensor, valid: Tensor | None = None,
                   rho: float = 4.0, cumulative: bool = False, kind: str = "joint") -> CorrectorLoss:
    """scores [*, n−1, K, K] (S_p(a, b)), cand_ids [*, n, K] target ids, labels [*, n] the verifier's
    argmax target ids at slots 1..n, valid [*, n] bool (False: no label, e.g. past the sequence end);
    kind: joint | cond | reach (module docstring)."""
    if kind not in LOSSES:
        raise ValueError(f"corrector loss kind {kind!r} is not valid; choose one of: {', '.join(LOSSES)}")
    K = scores.shape[-1]
    P = scores.shape[-3]
    idx = label_indices(cand_ids, labels, valid)  # [*, n]
    a_star, b_star = idx[..., :-1], idx[..., 1:]  # [*, n−1]
    mask = (a_star >= 0) & (b_star >= 0)  # [*, n−1] m_p
    if kind == "reach":
        mask = mask & reached_rows(scores, a_star, b_star, idx[..., 0] == 0)
    if cumulative:
        mask = mask.long().cumprod(-1).bool()
    if kind == "joint":
        flat = scores.float().flatten(-2)  # [*, n−1, K²] joint over the K×K transitions
        target = (a_star.clamp(min=0) * K + b_star.clamp(min=0))[..., None]  # [*, n−1, 1]
    else:  # the row of a*_p only: a softmax over slot p+1's K candidates
        flat = scores.float().gather(-2, a_star.clamp(min=0)[..., None, None].expand(
            *a_star.shape, 1, K)).squeeze(-2)  # [*, n−1, K]
        target = b_star.clamp(min=0)[..., None]  # [*, n−1, 1]
    ce = flat.logsumexp(-1) - flat.gather(-1, target).squeeze(-1)  # [*, n−1]
    ce = torch.where(mask, ce, torch.zeros_like(ce))
    wm = transition_weights(P, rho, scores.device) * mask.float()  # [*, n−1]  w_p m_p
    num = (wm * ce).sum()
    den = wm.sum()
    loss = num / den.clamp_min(torch.finfo(torch.float32).tiny)
    return CorrectorLoss(loss, num, den, ce, mask, idx)


def expected_weight_sum(n: int, rho: float = 4.0) -> float:
    """Σ_p w_p over a fully supervised block of n proposed slots (n−1 transitions)."""
    return sum(math.exp(-(p - 1) / rho) for p in range(1, n))
