"""The one verification routine (SPEC §0): every caller — engine, benchmark, explorer replay, training
metrics and tests — judges drafted blocks here.

Greedy rule: slot j is accepted iff every slot <= j equals the target's argmax.
"""
from __future__ import annotations

import torch
from torch import Tensor


def greedy_accept_length(proposals: Tensor, target_tokens: Tensor, valid: Tensor | None = None) -> Tensor:
    """Length of the accepted prefix. proposals, target_tokens: [..., n]; valid: [..., n] bool
    (False slots count as mismatches). Returns [...] long in 0..n."""
    match = proposals == target_tokens
    if valid is not None:
        match = match & valid
    return match.long().cumprod(-1).sum(-1)
