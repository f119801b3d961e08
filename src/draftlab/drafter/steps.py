"""The drafter's two inference passes as functions of tensors, the units `DFlashDrafter.compile_steps` compiles.

- `context_step`: the target tap features of new committed positions -> each layer's context K/V written at the
  streams' next context slots (an invalid position writes the scratch slot), -> the new fills;
- `block_step`: one block per stream against every valid context slot -> the block's final hidden states and the
  head's float32 logits (with a seeded drafter's seed bias and seed column, and the column's target ids).

Both read and write only the state's static buffers (`verifier.slots.StreamSlots`) and make their masks on the
device from the fills, so a pass of a given batch, width and capacity has one shape whatever the streams accepted.
Host-side work (making room, the fills' upper bound, the seeds' text) stays in `DFlashDrafter.extend_context` /
`draft`. When compiled, the context's width is padded to the block (or twice it: a round that joins a skipped
round's context) so a round meets one shape; a wider context (a prompt at prefill, once per request) runs eagerly.
"""
from __future__ import annotations

import torch
from torch import Tensor

from draftlab.verifier.forward import KVCache, slot_plan


def context_step(drafter, kv: KVCache, lengths: Tensor, feats: Tensor, valid: Tensor, positions: Tensor) -> Tensor:
    """feats [B, T, n_taps*H], valid [B, T] bool, positions [B, T] -> the new fills [B] (K/V written into `kv`)."""
    write, _, _ = slot_plan(lengths, valid, kv.capacity)
    keys, values = drafter.project_context(feats, positions)
    for i, (k, v) in enumerate(zip(keys, values)):
        kv.write(i, k, v, write)
    return lengths + valid.long().sum(-1)


def block_step(drafter, kv: KVCache, lengths: Tensor, block_ids: Tensor,
               block_pos: Tensor) -> tuple[Tensor, Tensor, Tensor | None]:
    """block_ids, block_pos [B, S] -> (hidden [B, S, H], logits [B, S, Vd(+1)] float32, the seed column's target
    ids [B, S] or None). A seeded drafter's head reads slots 1..S-1's seeds (slot 0 is the known token)."""
    valid = torch.arange(kv.capacity, device=lengths.device)[None, :] < lengths[:, None]  # [B, capacity]
    hidden = drafter.run_blocks(block_ids[:, None], block_pos[:, None], kv.k, kv.v, valid[:, None, :])[:, 0]
    if not drafter.reads_seeds:
        return hidden, drafter.logits(hidden), None
    seeds = torch.cat([torch.full_like(block_ids[:, :1], drafter.mask_token_id), block_ids[:, 1:]], 1)
    logits = drafter.logits(hidden, seeds, torch.arange(block_ids.shape[1], device=hidden.device))
    return hidden, logits, drafter.seed_ids(seeds) if drafter.seed_column else None


def padded_width(T: int, S: int) -> int | None:
    """The compiled context step's width for T new positions: S or 2S; None (run eagerly) past that."""
    return S if T <= S else 2 * S if T <= 2 * S else None


def pad_context(feats: Tensor, valid: Tensor, positions: Tensor, width: int) -> tuple[Tensor, Tensor, Tensor]:
    """Pad T context positions to `width` with invalid ones (they write the scratch slot, no mask reaches it)."""
    extra = width - valid.shape[1]
    if extra <= 0:
        return feats, valid, positions
    B = valid.shape[0]
    return (torch.cat([feats, feats.new_zeros(B, extra, feats.shape[-1])], 1),
            torch.cat([valid, valid.new_zeros(B, extra)], 1),
            torch.cat([positions, positions.new_zeros(B, extra)], 1))
