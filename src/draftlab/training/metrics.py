"""Validation metrics of a drafter on held-out references under teacher forcing.

For each validation block (anchor a, proposals at slots 1..n, n = S-1) the reference context is
the target's own text, so the token greedy verification would accept at slot k is the target's
greedy token for position a+k. Per block:
- accepted prefix = `greedy_accept_length(top1, target_greedy)` (the one verification rule);
- simulated τ = mean over blocks of 1 + accepted prefix (the bonus token included, docs/algorithms.md
  "Rounds, τ and verification");
  `sim_tau_se` its standard error over blocks (the run's noise: two independent estimates differ by
  about √2 of it);
- `sim_tau_per_slot[k-1]` = share of blocks whose accepted prefix reaches slot k, so
  `sim_tau = 1 + sum(sim_tau_per_slot)`;
- `slot_acc[k-1]` = top-1 accuracy at slot k (unconditional), `topk_cov[k-1]` = share of slots
  whose target token is among the drafter's top-K (the corrector's headroom, docs/algorithms.md "DCOCO").

A seeded drafter (its blocks' seeds given to `update`) adds, per slot k:
- `seed_rate[k-1]` = share of scored slots that carry a seed (not MASK);
- `seed_hit[k-1]` = share of seeded slots whose seed is the target token (the lookup's own top-1 there);
- `slot_acc_seeded[k-1]` / `slot_acc_unseeded[k-1]` = the drafter's top-1 accuracy where a seed exists / none;
- `seed_override[k-1]` = share of seeded slots where the drafter's top-1 is not the seed, and
  `seed_override_right[k-1]` = share of those overrides whose top-1 is the target token
  (so `seed_override * seed_override_right` is the share of seeded slots fixed by overriding).
A ratio with an empty denominator is NaN.
"""
from __future__ import annotations

import torch
from torch import Tensor

from draftlab.decoding.verify import greedy_accept_length
from draftlab.stats import mean_and_se


class BlockStats:
    """Accumulates per-slot counts over batches of blocks; `summary()` gives the metrics."""

    def __init__(self, n_slots: int, k: int):
        self.n, self.k = n_slots, k
        self.blocks = 0
        self.accept_sum = 0
        self.accept_sq = 0  # Σ acc² (the standard error)
        self.reach = torch.zeros(n_slots, dtype=torch.long)  # blocks whose prefix reaches slot k
        self.top1 = torch.zeros(n_slots, dtype=torch.long)
        self.topk = torch.zeros(n_slots, dtype=torch.long)
        self.count = torch.zeros(n_slots, dtype=torch.long)
        # seeded drafters: counts per slot of seeded, seed == target, top-1 right where seeded / unseeded,
        # top-1 != seed, and top-1 != seed and right (None until seeds are given)
        self.seed_counts: dict[str, Tensor] | None = None

    @torch.no_grad()
    def update(self, top_ids: Tensor, target_tokens: Tensor, valid: Tensor | None = None, seeds: Tensor | None = None,
               mask_id: int = -1) -> Tensor | None:
        """top_ids [N, n, K] target ids (best first); target_tokens [N, n]; valid [N, n] bool; seeds [N, n] the
        blocks' seeds (target ids, `mask_id` where a slot has none) of a seeded drafter, else None. Returns the
        counted blocks' accepted lengths [N'] (a paired comparison of two rules on the same blocks), or None."""
        if top_ids.shape[0] == 0:
            return None
        if valid is None:
            valid = torch.ones_like(target_tokens, dtype=torch.bool)
        top_ids, target_tokens, valid = top_ids.cpu(), target_tokens.cpu(), valid.cpu()
        acc = greedy_accept_length(top_ids[..., 0], target_tokens, valid)  # [N]
        blocks = valid.any(-1)  # a block counts when it has at least one scored slot
        self.blocks += int(blocks.sum())
        self.accept_sum += int(acc[blocks].sum())
        self.accept_sq += int((acc[blocks] ** 2).sum())
        self.reach += (acc[blocks, None] >= torch.arange(1, self.n + 1)[None, :]).long().sum(0)
        hit1 = (top_ids[..., 0] == target_tokens) & valid
        hitk = (top_ids[..., : self.k] == target_tokens[..., None]).any(-1) & valid
        self.top1 += hit1.long().sum(0)
        self.topk += hitk.long().sum(0)
        self.count += valid.long().sum(0)
        if seeds is not None:
            self.update_seeds(top_ids[..., 0], target_tokens, valid, seeds.cpu(), mask_id)
        return acc[blocks]

    def update_seeds(self, top1: Tensor, target_tokens: Tensor, valid: Tensor, seeds: Tensor, mask_id: int) -> None:
        """top1, target_tokens, seeds [N, n]; valid [N, n] bool: the seeded-slot counts."""
        if self.seed_counts is None:
            names = ("seeded", "unseeded", "seed_hit", "top1_seeded", "top1_unseeded", "override", "override_right")
            self.seed_counts = {k: torch.zeros(self.n, dtype=torch.long) for k in names}
        has = (seeds != mask_id) & valid
        right = top1 == target_tokens
        over = has & (top1 != seeds)
        for k, m in (("seeded", has), ("unseeded", valid & ~has), ("seed_hit", has & (seeds == target_tokens)),
                     ("top1_seeded", has & right), ("top1_unseeded", valid & ~has & right), ("override", over),
                     ("override_right", over & right)):
            self.seed_counts[k] += m.long().sum(0)

    def standard_error(self) -> float:
        """Standard error of the simulated τ over blocks (NaN below two blocks)."""
        m = mean_and_se(self.accept_sum, self.accept_sq, self.blocks)
        return float("nan") if m is None else m[1]

    def seed_summary(self) -> dict:
        """The seeded-slot report (module docstring); {} for a plain drafter."""
        if self.seed_counts is None:
            return {}
        c = self.seed_counts
        ratio = lambda a, b: (c[a].double() / c[b].double()).tolist()  # noqa: E731  (0/0 = NaN)
        return {"seed_rate": (c["seeded"].double() / self.count.double()).tolist(),
                "seed_hit": ratio("seed_hit", "seeded"), "slot_acc_seeded": ratio("top1_seeded", "seeded"),
                "slot_acc_unseeded": ratio("top1_unseeded", "unseeded"), "seed_override": ratio("override", "seeded"),
                "seed_override_right": ratio("override_right", "override")}

    def summary(self) -> dict:
        b = max(self.blocks, 1)
        c = self.count.clamp(min=1).double()
        return {
            "blocks": self.blocks,
            "sim_tau": 1.0 + self.accept_sum / b if self.blocks else float("nan"),
            "sim_tau_se": self.standard_error(),
            "sim_tau_per_slot": (self.reach.double() / b).tolist(),
            "slot_acc": (self.top1.double() / c).tolist(),
            f"top{self.k}_cov": (self.topk.double() / c).tolist(),
            "top1_mean": float(self.top1.sum() / max(int(self.count.sum()), 1)),
            f"top{self.k}_mean": float(self.topk.sum() / max(int(self.count.sum()), 1)),
            **self.seed_summary(),
        }
