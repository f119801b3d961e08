"""The sampled walk of every corrector family that walks (docs/algorithms.md "Correctors at T > 0"): at T > 0 the
proposed path is drawn slot by slot from the family's conditional given the *sampled* predecessor, and the round
reports the whole row each token was drawn from, so the verifier's min(1, p/q) rule and its residual
norm(max(0, p − q)) over the whole target vocabulary keep decoding lossless (`draftlab.decoding.verify`).

Each family's row at slot p given the sampled predecessor y_{p−1} (ℓ the drafter's logits, over its top-K candidates
or its whole draft vocabulary; y_0 the block's slot-0 token):
- DCOCO (pair rows over K): slot 1 ℓ_1(b), slot p+1 S_p(y_p, b) = ℓ_{p+1}(b) + Δθ(y_p, b). Calibrated as a
  conditional: the joint K² loss is a softmax CE over S, and Δθ ≡ 0 gives the drafter's top-K renormalised.
- LiLiCorr (pair rows over K): slot 1 ℓ_1(b) + start(b), slot p+1 ℓ_{p+1}(b) + pair_p(y_p, b). Its potentials
  σ·cos are not calibrated alone (bounded by σ, trained with a margin and a penalty beside the CE, and a constant
  row at init): the drafter's logits supply the marginal, the pair potential the correction (a product of experts,
  like DCOCO's S); constant potentials give the drafter's top-K renormalised.
- DFlash-2's selector (over K, as its reference samples): ℓ_p(b) + ⟨P[y_{p−1}] ⊙ W h_p, U[b]⟩.
- DSpark, Domino (over the draft vocabulary, and the seed column on a seeded drafter): ℓ_p + δ_p(y_{p−1}); δ ≡ 0 is
  the plain drafter's own row. Both are trained with a softmax CE over it: calibrated as conditionals.
Every row goes through the same temperature / top-k / top-p processing as the target's (`process_logits`), and the
token is drawn from that very tensor by inverse CDF with a uniform drawn outside the step (a compiled step cannot
hold a Generator), so the reported q and the draw cannot disagree. q travels sparse: (target ids, probabilities)
per slot, a duplicate id's entries summed by the verifier, every other id 0.
At T = 0 a sampled arm is its point-mass arm (the argmax walk), token for token. Only the greedy path rule walks:
Global-Sum and the geometric rule pick a whole path by Viterbi, whose conditionals would need a forward-backward
pass, so they have no sampled arm.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from draftlab.decoding.verify import SamplingParams, process_logits

SUFFIX = "sampled"  # the arm option of a family's sampled walk (`dcoco-sampled`, `dspark-sampled-seeded`, ...)


@dataclass
class SampledWalk:
    """A sampled path with the rows it was drawn from: tokens [*, n] target ids; q [*, n, M] the processed row of
    each slot (sums to 1); ids [*, n, M] the target id of each entry (-1: an entry with no token, q = 0 there)."""

    tokens: Tensor
    q: Tensor
    ids: Tensor


def inverse_cdf(probs: Tensor, u: Tensor) -> Tensor:
    """The index i with cdf(i−1) <= u·total < cdf(i) of each row: probs [..., M] (>= 0), u [...] in [0, 1) ->
    [...] long. An entry of zero mass is never drawn."""
    cdf = probs.cumsum(-1)
    return (cdf <= u[..., None] * cdf[..., -1:]).sum(-1).clamp(max=probs.shape[-1] - 1)


def draw(logits: Tensor, sp: SamplingParams, u: Tensor) -> tuple[Tensor, Tensor]:
    """One draw per row: logits [..., M], u [...] -> (index [...], the processed row it was drawn from [..., M])."""
    probs = process_logits(logits, sp)
    return inverse_cdf(probs, u), probs


def pair_walk(first: Tensor, pair: Tensor, ids: Tensor, sp: SamplingParams, u: Tensor) -> SampledWalk:
    """The sampled walk over pair rows: first [*, K] slot 1's logits, pair [*, n−1, K, K] (pair[..., p, a] the row of
    slot p+2 after candidate a of slot p+1), ids [*, n, K] the candidates' target ids, u [*, n] -> the walk (leading
    dims kept)."""
    lead, (n, K) = ids.shape[:-2], ids.shape[-2:]
    N = lead.numel()
    first, pair, ids, u = first.reshape(N, K), pair.reshape(N, n - 1, K, K), ids.reshape(N, n, K), u.reshape(N, n)
    rows = torch.arange(N, device=ids.device)
    j, q = draw(first.float(), sp, u[:, 0])
    idx, qs = [j], [q]
    for p in range(n - 1):
        j, q = draw(pair[rows, p, j].float(), sp, u[:, p + 1])
        idx.append(j)
        qs.append(q)
    idx = torch.stack(idx, 1)  # [N, n]
    return reshaped(SampledWalk(ids.gather(-1, idx[..., None]).squeeze(-1), torch.stack(qs, 1), ids), lead)


def reshaped(walk: SampledWalk, lead: tuple) -> SampledWalk:
    """A walk over N = prod(lead) flat rows with the leading dims `lead` back."""
    return SampledWalk(walk.tokens.reshape(*lead, -1), walk.q.reshape(*lead, *walk.q.shape[-2:]),
                       walk.ids.reshape(*lead, *walk.ids.shape[-2:]))
