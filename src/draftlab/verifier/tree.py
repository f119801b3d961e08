"""Packed tree scoring (SpecOPD; docs/algorithms.md "Packed scoring"): score many branches hanging off one cached
trunk in one pass.

A branch b of W tokens after anchor a_b needs W-1 new query rows (branch tokens 1..W-1 at logical
positions a_b+1..a_b+W-1); the trunk row at a_b already scores branch token 1 (the read rule).
Each row sees the trunk up to its own anchor, its own branch's earlier rows and itself; never a
sibling branch or a later trunk token. Rows are appended to the trunk's cache, scored, and the
cache is cropped back, so the trunk's K/V is computed once for all branches.
"""
from __future__ import annotations

import torch
from torch import Tensor

from draftlab.verifier.model import TargetModel, TargetOutput, crop_cache


def slot_positions(valid: Tensor) -> Tensor:
    """Logical position of every cache slot ([B, L]; -1 where the slot is padding or a hole)."""
    pos = valid.long().cumsum(-1) - 1
    return torch.where(valid, pos, torch.full_like(pos, -1))


def tree_mask(trunk_valid: Tensor, anchors: Tensor, rows_per_branch: int, branch_valid: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Mask and positions of the packed branch rows.

    trunk_valid [B, L] bool; anchors [B, A] logical anchor positions (-1 = no branch);
    rows_per_branch R = W-1; branch_valid [B, A, R] marks rows that exist (ragged branches).
    Returns mask [B, A*R, L + A*R] bool and position ids [B, A*R].
    """
    B, L = trunk_valid.shape
    A = anchors.shape[1]
    R = rows_per_branch
    dev = trunk_valid.device
    spos = slot_positions(trunk_valid)  # [B, L]
    # trunk part: row (a, i) sees valid slots whose position <= anchor
    sees_trunk = (spos[:, None, :] >= 0) & (spos[:, None, :] <= anchors[:, :, None])  # [B, A, L]
    sees_trunk = sees_trunk[:, :, None, :].expand(B, A, R, L).reshape(B, A * R, L)
    # branch part: block-diagonal causal over branches
    br = torch.arange(A * R, device=dev)
    same_branch = (br[:, None] // R) == (br[None, :] // R)
    causal = br[:, None] >= br[None, :]
    sees_rows = (same_branch & causal).expand(B, -1, -1).clone()  # [B, AR, AR]
    if branch_valid is not None:
        rv = branch_valid.reshape(B, A * R)
        sees_rows &= rv[:, None, :]
        sees_rows |= torch.eye(A * R, dtype=torch.bool, device=dev)  # every row sees itself
    pos = anchors[:, :, None] + torch.arange(1, R + 1, device=dev)  # [B, A, R]
    pos = pos.clamp(min=0).reshape(B, A * R)
    return torch.cat([sees_trunk, sees_rows], dim=-1), pos


@torch.no_grad()
def score_tree(target: TargetModel, cache, trunk_valid: Tensor, anchors: Tensor, branch_tokens: Tensor,
               branch_valid: Tensor | None = None, hidden_only: bool = False) -> TargetOutput:
    """Score branch rows against a filled trunk cache; the cache is restored afterwards.

    branch_tokens [B, A, R] (R = W-1, branch tokens 1..W-1). Returns logits [B, A, R, V]: row i of
    branch b is the target's distribution for branch token i+1 (hidden_only: the final-normed hidden
    states [B, A, R, H] instead, `target.head` gives the logits).
    """
    B, A, R = branch_tokens.shape
    L = cache.get_seq_length()
    mask, pos = tree_mask(trunk_valid, anchors, R, branch_valid)
    out = target(branch_tokens.reshape(B, A * R), cache=cache, position_ids=pos, mask=mask, hidden_only=hidden_only)
    crop_cache(cache, L)
    if hidden_only:
        return TargetOutput(None, None, out.hidden.reshape(B, A, R, -1))
    return TargetOutput(out.logits.reshape(B, A, R, -1), None)
