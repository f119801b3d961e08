"""The DFlash drafter's inference state (per-stream context K/V and, when seeded, committed text) and its
draft output (implements `draftlab.decoding.api.DraftOutput`), including the seed column's id mapping."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from draftlab.ngram import StreamSeeds
from draftlab.verifier.slots import StreamSlots


def seed_column_ids(idx: Tensor, vocab: Tensor, extra: Tensor) -> Tensor:
    """Draft indices idx [...] over [draft vocabulary; seed column] -> target ids: vocab[idx] for idx < Vd,
    extra [...] (the seed column's id, broadcastable) for idx == Vd."""
    Vd = vocab.numel()
    return torch.where(idx == Vd, extra, vocab[idx.clamp(max=Vd - 1)])


class DrafterState(StreamSlots):
    """Per-stream drafter context: each layer's context K/V (normed, rotated) in a static buffer of slots
    (`verifier.slots.StreamSlots`: stream b's context in slots 0..lengths[b]-1), and for a seeded drafter the
    committed text per stream (the seed index). It is a `TracksStreams`: the engine calls start / extend /
    drop_streams on it (no-ops for the text of a plain drafter)."""

    def __init__(self, num_layers: int, batch: int, heads: int, head_dim: int, dtype, device, capacity: int = 0,
                 seeds: StreamSeeds | None = None):
        super().__init__(num_layers, batch, heads, head_dim, dtype, device, capacity)
        self.seeds = seeds  # seeded drafters: the committed text per stream (draftlab.ngram)
        self.anchor: Tensor | None = None  # [B, n_taps*H] each stream's last context row (the taps before its block)

    def note_anchor(self, feats: Tensor, valid: Tensor) -> None:
        """Keep each stream's last valid row of feats [B, T, n_taps*H] (valid [B, T]) as its anchor: the target row
        just before the next block (the one that predicted its slot 0). Eager, no host copy."""
        T = valid.shape[1]
        last = (valid.long() * torch.arange(1, T + 1, device=valid.device)).argmax(1)  # [B] the last valid index
        row = feats.gather(1, last[:, None, None].expand(-1, 1, feats.shape[-1]))[:, 0]  # [B, n_taps*H]
        old = self.anchor if self.anchor is not None else torch.zeros_like(row)
        self.anchor = torch.where(valid.any(1)[:, None], row, old)

    @property
    def keys(self) -> list[Tensor]:  # per layer [B, hk, capacity, d]
        return self.kv.k

    @property
    def values(self) -> list[Tensor]:
        return self.kv.v

    def start(self, prompts: list[list[int]], first: Tensor) -> None:
        if self.seeds is not None:
            self.seeds.start(prompts, first)

    def extend(self, tokens: Tensor, counts: Tensor) -> None:
        if self.seeds is not None:
            self.seeds.extend(tokens, counts)

    def drop_streams(self, keep: Tensor) -> None:
        """Remove finished streams (keep: bool [B])."""
        idx = keep.nonzero().squeeze(-1)
        self.select(idx)
        if self.anchor is not None:
            self.anchor = self.anchor.index_select(0, idx.to(self.anchor.device))
        if self.seeds is not None:
            self.seeds.drop_streams(keep)


@dataclass
class DraftOutput:
    """The DFlash drafter's block draft (implements `draftlab.decoding.api.DraftOutput`)."""

    logits: Tensor  # [B, S, Vd] float32 over the draft vocabulary
    hidden: Tensor  # [B, S, H] final (normed) hidden states, the corrector's input
    vocab: Tensor | None  # [Vd] long: draft index -> target id; None = full vocabulary
    block_ids: Tensor | None = None  # [B, S] the block's input ids (slot 0 = last committed token)
    # the seed column (arch.seed_logit): logits then have Vd+1 columns, the last one the logit of extra_ids
    extra_ids: Tensor | None = None  # [B, S] long: the seed column's target id per slot, -1 where it has none
    target_vocab_size: int = 0  # V: the width of a proposal's q over the target vocabulary (seed column only)
    seed_spans: list[int] | None = None  # host: each block's seeded span (set by the round for a seeded drafter)
    # [B, n_taps*H] the target's taps just before each block: the `anchor` slot a corrector family's contract may read
    anchor: Tensor | None = None

    def to_target_ids(self, idx: Tensor) -> Tensor:
        """Draft indices idx [B, S] or [B, S, K] -> target ids (index Vd = the slot's seed column)."""
        if self.vocab is None:
            return idx
        if self.extra_ids is None:
            return self.vocab[idx]
        ex = self.extra_ids if idx.dim() == self.extra_ids.dim() else self.extra_ids[..., None]
        return seed_column_ids(idx, self.vocab, ex)

    def argmax(self) -> Tensor:
        """[B, S] target ids of the top-1 draft token per slot."""
        return self.to_target_ids(self.logits.argmax(-1))

    def topk(self, k: int) -> tuple[Tensor, Tensor]:
        """(target ids [B, S, K], logits [B, S, K]), best first."""
        vals, idx = self.logits.topk(min(k, self.logits.shape[-1]), dim=-1)
        return self.to_target_ids(idx), vals
