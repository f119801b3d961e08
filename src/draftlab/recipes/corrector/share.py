"""The share of a speculative round that a proposal step takes, measured through the real engine.

`proposal_share(target, drafter, proposal, prompts, max_new_tokens)` runs the speculative engine with
and without the proposal step at T=0 on a few prompts: its share of round time (the `propose`
phase), both engine τ, and whether the outputs agree (they must: greedy decoding is lossless).
"""
from __future__ import annotations

import torch

from draftlab.decoding.api import ProposalStep
from draftlab.decoding.speculative import SpeculativeEngine


@torch.no_grad()
def proposal_share(target, drafter, proposal: ProposalStep, prompts: list[list[int]], max_new_tokens: int) -> dict:
    """{'uncorrected': ..., 'corrected': ...} per engine run (τ, phase shares of round time, round ms,
    rounds), `proposal_share_of_round` and `lossless` (identical tokens)."""
    out = {}
    toks = {}
    for name, prop in (("uncorrected", None), ("corrected", proposal)):
        eng = SpeculativeEngine(target, drafter, prop)
        eng.generate(prompts[:1], 4, eos_ids=[])  # warm-up
        res = eng.generate(prompts, max_new_tokens, eos_ids=[])
        times = res.round_times.sum(0)  # [phases]
        total = float(times.sum())
        share = {p: float(t) / total if total > 0 else None for p, t in zip(res.phases, times)}
        acc = [a for s in res.accepted for a in s]
        out[name] = {"tau": sum(a + 1 for a in acc) / max(len(acc), 1), "round_share": share,
                     "round_ms": 1e3 * total / max(res.round_times.shape[0], 1), "rounds": res.round_times.shape[0]}
        toks[name] = res.tokens
    out["proposal_share_of_round"] = out["corrected"]["round_share"].get("propose")
    out["lossless"] = toks["uncorrected"] == toks["corrected"]
    return out
