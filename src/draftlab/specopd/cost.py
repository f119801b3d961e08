"""Scoring cost of the proposal tree (the cost model of docs/algorithms.md "Packed scoring"): analytic rows
and a measurement.

Analytic projection/MLP rows for one sequence of length L with anchors a_b (0-based) and width W:
- packed (shared trunk + tree rows):            L + A (W − 1)
- independent (each branch's full prefix again): Σ_b (a_b + W)   (= Σ_b (ℓ_b + W − 1), ℓ_b = a_b + 1
  the prefix length up to and including the anchor: the Σ(a_b + W − 1) of docs/algorithms.md with 1-based anchors)
The measurement times the same two ways of getting every branch's W target distributions on the
real target — one trunk pass + `branch_target_logits` vs one uncached forward per branch — and
reports the largest logit difference between them (the packed == recompute check at scale).
"""
from __future__ import annotations

import time

import torch

from draftlab.specopd.tree import branch_target_logits, trunk_pass


def analytic_rows(seq_len: int, anchors: list[int], W: int) -> dict:
    packed = seq_len + len(anchors) * (W - 1)
    independent = sum(a + W for a in anchors)
    return {"L": seq_len, "A": len(anchors), "W": W, "rows_packed": packed, "rows_independent": independent,
            "rows_ratio": independent / max(packed, 1)}


def paper_cost_model(L: int = 2048, A: int = 512, W: int = 7) -> dict:
    """The paper's example with evenly spaced anchors (paper: 529,664 -> 5,120 rows quoted; ~103×)."""
    anchors = [round(i * (L - W) / max(A - 1, 1)) for i in range(A)]
    return analytic_rows(L, anchors, W)


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


@torch.no_grad()
def measure_scoring(target, sequences: list[list[int]], prompt_lens: list[int], A: int, W: int, seed: int = 0) -> dict:
    """Packed vs independent scoring of A random full-width branches per sequence (random tokens:
    the cost does not depend on them). Returns times, analytic rows and the max |Δlogit|."""
    g = torch.Generator().manual_seed(seed)
    dev = target.device
    t_packed = t_indep = 0.0
    rows, worst = [], 0.0
    V = target.vocab_size
    for ids, P in zip(sequences, prompt_lens):
        L = len(ids)
        lo, hi = max(P, 1), L - 1 - W  # full branches only
        if hi < lo:
            continue
        cand = torch.arange(lo, hi + 1)
        anchors = cand[torch.randperm(len(cand), generator=g)[:A]].sort().values  # [A]
        branch = torch.randint(0, V, (1, len(anchors), W), generator=g)
        x = torch.tensor([ids])
        _sync(dev)
        t0 = time.perf_counter()
        trunk = trunk_pass(target, x, torch.tensor([L]))
        packed = branch_target_logits(target, trunk, anchors[None], branch, torch.full((1, len(anchors)), W))[0]
        _sync(dev)
        t1 = time.perf_counter()
        for j, a in enumerate(anchors.tolist()):
            seq = torch.tensor([ids[: a + 1] + branch[0, j, : W - 1].tolist()], device=dev)
            full = target(seq).logits[0, a:]  # [W, V]: row a scores y_1, row a+i scores y_{i+1}
            worst = max(worst, float((full - packed[j]).abs().max()))
        _sync(dev)
        t2 = time.perf_counter()
        t_packed += t1 - t0
        t_indep += t2 - t1
        rows.append(analytic_rows(L, anchors.tolist(), W))
        del trunk
    if not rows:
        return {}
    rp, ri = sum(r["rows_packed"] for r in rows), sum(r["rows_independent"] for r in rows)
    return {"sequences": len(rows), "branches": sum(r["A"] for r in rows), "W": W,
            "rows_packed": rp, "rows_independent": ri, "rows_ratio_analytic": ri / max(rp, 1),
            "packed_s": t_packed, "independent_s": t_indep, "time_ratio_measured": t_indep / max(t_packed, 1e-9),
            "max_abs_logit_diff": worst, "per_sequence": rows}
