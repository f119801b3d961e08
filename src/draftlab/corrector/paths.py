"""Path selection over DCOCO transition scores (docs/algorithms.md "Path rules"), batched over streams.

scores [N, n−1, K, K] with scores[:, p, a, b] = S_p(a, b) (p = 1..n−1 in docs/algorithms.md's numbering, index
p−1 here); first [N, K] = slot 1's draft logits ℓ_1 (the cand_logits of slot 1). All rules return
chosen candidate indices [N, n]; `path_tokens` maps them to target ids.

- greedy (the method): y_1 = argmax ℓ_1 (the drafter's top candidate); y_{p+1} = argmax_b S_p(y_p, b).
- globalsum: Viterbi on ℓ_1(y_1) + Σ_p S_p(y_p, y_{p+1}).
- geometric: Viterbi on ℓ_1(y_1) + Σ_p λ^p S_p(y_p, y_{p+1}) (λ = 0.75 by default).
`oracle_path` is the headroom's yardstick: the block an ideal re-selector among the top-K would propose,
either free at every slot (the top-K oracle) or under prefix-first greedy's constraint that slot 1
keeps the drafter's top-1 (the reachable oracle).

Slot 1 has no incoming transition (slot 0's token is known), so its only score is ℓ_1 — the
"slot-0 → slot-1 transition" with weight λ^0 = 1. `include_first=False` drops it (then slot 1 is
chosen by the transitions alone). Ties go to the lowest candidate index everywhere, so with
Δθ ≡ 0 every rule returns the drafter's argmax block.
"""
from __future__ import annotations

import torch
from torch import Tensor

from draftlab.corrector.variants import RULES
from draftlab.kernels.dispatch import greedy_walk


def greedy_path(scores: Tensor, first: Tensor, backend: str | None = None) -> Tensor:
    """Prefix-first greedy walk: scores [*, n−1, K, K], first [*, K] -> [*, n]."""
    lead, (P, K) = first.shape[:-1], scores.shape[-3:-1]
    N = lead.numel()
    return greedy_walk(scores.reshape(N, P, K, K), first.reshape(N, K).argmax(-1), backend).reshape(*lead, P + 1)


def viterbi_path(scores: Tensor, first: Tensor | None = None, lam: float = 1.0, include_first: bool = True) -> Tensor:
    """argmax over all K^n paths of first(y_1) + Σ_p λ^p S_p(y_p, y_{p+1}) (p = 1..n−1) -> [N, n].
    lam = 1: Global-Sum; lam < 1: geometric discount."""
    N, P, K, _ = scores.shape
    scores = scores.detach()
    dt = torch.promote_types(scores.dtype, torch.float32)
    if first is None or not include_first:
        delta = scores.new_zeros(N, K, dtype=dt)  # [N, K] best score of a path ending in each candidate
    else:
        delta = first.detach().to(dt)
    back = []
    for p in range(P):
        cand = delta[:, :, None] + (lam ** (p + 1)) * scores[:, p].to(dt)  # [N, K(a), K(b)]
        delta, arg = cand.max(dim=1)  # [N, K(b)]; ties -> lowest a
        back.append(arg)
    y = delta.argmax(-1)  # [N] last slot
    path = [y]
    for arg in reversed(back):
        y = arg.gather(1, y[:, None]).squeeze(1)
        path.append(y)
    return torch.stack(path[::-1], dim=1)  # [N, n]


def select_path(scores: Tensor, cand_logits: Tensor, rule: str = "greedy", lam: float = 0.75,
                backend: str | None = None) -> Tensor:
    """scores [*, n−1, K, K], cand_logits [*, n, K] -> chosen candidate indices [*, n]."""
    lead, (n, K) = cand_logits.shape[:-2], cand_logits.shape[-2:]
    cand_logits = cand_logits.reshape(-1, n, K)  # [N, n, K]
    scores = scores.reshape(cand_logits.shape[0], n - 1, K, K)  # [N, n−1, K, K]
    first = cand_logits[:, 0]  # [N, K] ℓ_1
    if rule == "greedy":
        idx = greedy_path(scores.detach(), first.detach(), backend)
    elif rule == "globalsum":
        idx = viterbi_path(scores, first, 1.0)
    elif rule == "geometric":
        idx = viterbi_path(scores, first, lam)
    else:
        raise ValueError(f"path rule {rule!r} is not valid; choose one of: {', '.join(RULES)}")
    return idx.reshape(*lead, n)


def path_tokens(idx: Tensor, cand_ids: Tensor) -> Tensor:
    """Candidate indices [*, n] -> target ids [*, n] (cand_ids [*, n, K])."""
    return cand_ids.gather(-1, idx[..., None]).squeeze(-1)


def path_score(scores: Tensor, first: Tensor | None, idx: Tensor, lam: float = 1.0) -> Tensor:
    """first(y_1) + Σ_p λ^p S_p(y_p, y_{p+1}) of given paths idx [N, n] -> [N] (tests, diagnostics)."""
    N, P = scores.shape[:2]
    rows = torch.arange(N, device=scores.device)
    total = first[rows, idx[:, 0]] if first is not None else scores.new_zeros(N)
    for p in range(P):
        total = total + (lam ** (p + 1)) * scores[rows, p, idx[:, p], idx[:, p + 1]]
    return total


def oracle_path(cand_ids: Tensor, targets: Tensor, reachable: bool = False) -> Tensor:
    """The block an ideal re-selector would propose: the verifier's token wherever it is among the K
    candidates, else the drafter's top-1 (then wrong). reachable=True: slot 1 keeps the drafter's top-1,
    as prefix-first greedy requires (docs/algorithms.md "Path rules"), so only slots 2..n can be re-selected. Under the
    greedy verification rule its accepted prefix is the longest over every path of the grid (that keeps slot 1's
    top-1 when reachable). cand_ids [..., n, K] target ids, best first; targets [..., n] -> [..., n]."""
    hit = (cand_ids == targets[..., None]).any(-1)  # [..., n]
    out = torch.where(hit, targets, cand_ids[..., 0])  # [..., n]
    if reachable:
        out = torch.cat([cand_ids[..., :1, 0], out[..., 1:]], -1)
    return out
