"""Ragged multi-stream KV-cache state for the target: N streams decoded together.

All streams share one `KVCache` of width L (slots). Each stream marks which slots are valid
(`valid[b, l]`); padding and rejected draft tokens stay in the cache as masked holes, so streams that
accept different numbers of tokens never need separate caches. Logical positions count only valid
slots. `commit` invalidates a stream's rejected tail, `trim` drops slot columns that no stream uses
any more (the plain crop when there is one stream), and `compact` squeezes holes out when they pile up.
Dropping finished streams and compacting keep the KV buffer's capacity (`forward.KVCache`), so the
survivors do not re-allocate at twice their remaining length at the next append.
"""
from __future__ import annotations

import torch
from torch import Tensor

from draftlab.verifier.model import TargetModel, TargetOutput, causal_mask, crop_cache, gather_cache


class RaggedSlots:
    """A per-stream cache of slots: `valid` [B, L] bool (False = left padding or a rejected hole)."""

    valid: Tensor

    @property
    def batch(self) -> int:
        return self.valid.shape[0]

    @property
    def width(self) -> int:
        return self.valid.shape[1]


class StreamCache(RaggedSlots):
    def __init__(self, target: TargetModel, batch: int, device: torch.device | None = None):
        self.target = target
        self.cache = target.new_cache()
        dev = device or target.device
        self.valid = torch.zeros(batch, 0, dtype=torch.bool, device=dev)  # [B, L]
        self.next_pos = torch.zeros(batch, dtype=torch.long, device=dev)  # [B] valid tokens so far

    def prefill(self, prompts: list[list[int]], pad_id: int, taps=(), last_logits_only: bool = False) -> TargetOutput:
        """Left-padded prefill of one prompt per stream. Returns logits [B, Tmax, V] (or [B, 1, V], the
        last prompt token's, with last_logits_only: the LM head over every prompt position is a large
        share of a long prefill) and taps [B, Tmax, ...]."""
        T = max(len(p) for p in prompts)
        dev = self.valid.device
        ids = torch.full((self.batch, T), pad_id, dtype=torch.long, device=dev)
        new_valid = torch.zeros(self.batch, T, dtype=torch.bool, device=dev)
        for b, p in enumerate(prompts):
            ids[b, T - len(p):] = torch.tensor(p, dtype=torch.long, device=dev)
            new_valid[b, T - len(p):] = True
        return self.append(ids, new_valid, taps=taps, logits_to_keep=1 if last_logits_only else 0)

    def append(self, ids: Tensor, new_valid: Tensor | None = None, taps=(), logits_to_keep: int = 0) -> TargetOutput:
        """Run ids [B, T] after each stream's valid tokens; they are valid unless new_valid says not.
        A stream's new valid tokens take consecutive logical positions."""
        B, T = ids.shape
        if new_valid is None:
            new_valid = torch.ones(B, T, dtype=torch.bool, device=ids.device)
        pos = self.next_pos[:, None] + (new_valid.long().cumsum(-1) - 1).clamp(min=0)  # [B, T]
        mask = causal_mask(self.valid, T, new_valid)
        out = self.target(ids, cache=self.cache, position_ids=pos, mask=mask, taps=taps, logits_to_keep=logits_to_keep)
        self.valid = torch.cat([self.valid, new_valid], dim=1)
        self.next_pos = self.next_pos + new_valid.long().sum(-1)
        return out

    def commit(self, n_keep: Tensor, T: int) -> None:
        """After an append of T tokens, keep only the first n_keep[b] of them per stream."""
        keep = torch.arange(T, device=n_keep.device)[None, :] < n_keep[:, None]  # [B, T]
        tail = self.valid[:, -T:]
        self.next_pos = self.next_pos - (tail & ~keep).long().sum(-1)
        self.valid[:, -T:] = tail & keep
        self.trim()

    def trim(self) -> None:
        """Drop trailing slot columns that no stream uses (for a single stream: a plain crop)."""
        used = self.valid.any(0)  # [L]
        if used.numel() == 0:
            return
        last = int(used.nonzero().max()) + 1 if used.any() else 0
        if last < self.width:
            crop_cache(self.cache, last)
            self.valid = self.valid[:, :last]

    def compact(self, min_hole_fraction: float = 0.25) -> bool:
        """Squeeze holes out (left-padding each stream) when they exceed a share of the cache."""
        if self.width == 0:
            return False
        holes = 1.0 - self.valid.float().mean().item()
        if holes < min_hole_fraction:
            return False
        n = self.valid.sum(-1)  # [B]
        W = int(n.max())
        # stable order: invalid slots first, then valid slots in original order
        order = torch.argsort(self.valid.long() * (self.width + 1) + torch.arange(self.width, device=n.device), dim=-1)
        index = order[:, self.width - W:]  # [B, W]
        gather_cache(self.cache, index)
        self.valid = torch.arange(W, device=n.device)[None, :] >= (W - n)[:, None]
        return True

    def drop_streams(self, keep: Tensor) -> None:
        """Remove finished streams (keep: bool [B])."""
        idx = keep.nonzero().squeeze(-1)
        self.cache.select_streams(idx)  # keeps its capacity (no re-allocation at the next append)
        self.valid = self.valid.index_select(0, idx)
        self.next_pos = self.next_pos.index_select(0, idx)
        self.trim()
