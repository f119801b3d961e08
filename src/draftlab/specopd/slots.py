"""The drafter's proposal distribution at the slots SpecOPD reads, as the engine proposes from it (docs/algorithms.md
"Proposal tree"; on a seeded drafter, "Seeded block drafting"): every SpecOPD term takes its q through this module.

SpecOPD reads slots 1..W of the block at each anchor: branches are samples of that q, overlaps compare it with
the target's p, the Draft-OPD update recomputes it. For the paper's drafter q = softmax(`drafter.logits(h)`)
over the draft vocabulary (index -> target id through `drafter.draft_vocab`). A seeded drafter
(`arch.seed = "lookup"`) differs in three ways, each handled here once:
1. block input `[x_a, s_1..s_m, MASK...]`: `block_rows` computes the seeds with the one seeding routine
   (`drafter.train_seeds`: teacher-forced from x_{<=a}, equal to the engine's incremental seeds on the same
   text) and hands them to `forward_train`;
2. the seed bias: slot k's seed logit gains `seed_bias[k-1]` (`drafter.logits(hidden, seeds, slots)`);
3. the seed column: logits [.., Vd+1] whose last column is the slot's seed where it lies outside the draft
   vocabulary, so the index -> id map differs per row. `slot_logits` then writes each row over the target
   vocabulary (`over_target`: draft columns at their ids, the column at its seed, -inf elsewhere): the q that
   `decoding.api.DrafterProposal` writes for the engine, with vocab None.
Consumers read a (logits, vocab) pair and are otherwise unchanged (sampling, overlap, acceptance tests).
A drafter whose head reads no seeds gets seeds None: `drafter.logits(hidden)` with `drafter.draft_vocab`,
bit for bit the plain path.
"""
from __future__ import annotations

import torch
from torch import Tensor


def reads_seeds(drafter) -> bool:
    """Whether the drafter's logits depend on its slots' seeds (the seed bias or the seed column)."""
    return bool(getattr(drafter, "reads_seeds", False))


def block_rows(drafter, feats: Tensor, ctx_valid: Tensor, ids: Tensor, anchors: Tensor, W: int,
               lengths: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
    """(hidden [B, A, W, H] of slots 1..W at every anchor, with gradients; their seeds [B, A, W] (target ids
    or MASK) when the drafter's head reads them, else None). A seeded drafter's block input carries the seeds
    of x_{<=a} (ids [B, T], lengths [B]: each row's real length; anchors past it are padding)."""
    seeds = None
    if getattr(getattr(drafter, "arch", None), "seeded", False):
        seeds = drafter.train_seeds(ids, anchors, lengths)  # [B, A, n]
    hidden = drafter.forward_train(feats, ctx_valid, ids, anchors, seeds)[:, :, 1:W + 1]  # of [B, A, S, H]
    return hidden, (seeds[..., :W].to(hidden.device) if seeds is not None and reads_seeds(drafter) else None)


def over_target(logits: Tensor, vocab: Tensor, extra: Tensor, V: int) -> Tensor:
    """logits [..., Vd+1] over [draft vocabulary; seed column] -> [..., V] over the target vocabulary: column j
    < Vd at vocab[j], the seed column at extra [...] (its target id, outside the vocabulary; -1 = none: that
    column's mass is 0, its logit is -inf anyway), -inf elsewhere. Differentiable in logits."""
    Vd = vocab.numel()
    full = logits.new_full((*logits.shape[:-1], V), float("-inf")).index_copy(-1, vocab, logits[..., :Vd])
    has = extra >= 0
    # rows without a column rewrite their own vocab[0] entry, so one scatter serves every row
    where = torch.where(has, extra, vocab[0].expand_as(extra))  # [...]
    value = torch.where(has, logits[..., Vd], logits[..., 0])  # [...]
    return full.scatter(-1, where[..., None], value[..., None])


def slot_logits(drafter, hidden: Tensor, seeds: Tensor | None = None,
                slots: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
    """(q logits [..., Vq], vocab [Vq] | None) of hidden rows [..., H] with their seeds [...] (None: the head
    reads none) and slot indices slots [...] (None: the last dim of seeds is slots 1..w). Vq = Vd with
    `drafter.draft_vocab`; with the seed column, Vq = V (`over_target`) and vocab None."""
    if seeds is None:
        return drafter.logits(hidden), drafter.draft_vocab
    logits = drafter.logits(hidden, seeds, slots)  # [..., Vd (+1)]
    if not drafter.seed_column:
        return logits, drafter.draft_vocab
    extra = drafter.seed_ids(seeds).to(logits.device)  # [...] the column's target id, -1 = none
    return over_target(logits, drafter.draft_vocab, extra, drafter.arch.target_vocab_size), None


def row_keys(seeds: Tensor | None) -> tuple[Tensor, ...]:
    """The per-row tensors that travel with flattened hidden rows [N, H] through row chunks: () without seeds,
    else (seeds [N], slots [N]) for seeds [..., W] of slots 1..W."""
    if seeds is None:
        return ()
    slots = torch.arange(1, seeds.shape[-1] + 1, device=seeds.device).expand_as(seeds)  # [..., W]
    return seeds.flatten(), slots.flatten()


def draft_slot_logits(draft, W: int) -> tuple[Tensor, Tensor | None]:
    """The engine's draft output (`draft(state, block, positions)`) at slots 1..W as (logits [b, W, Vq],
    vocab): with a seed column (`extra_ids`) written over the target vocabulary, as `slot_logits` does."""
    logits = draft.logits[:, 1:W + 1]  # [b, W, Vd (+1)]
    extra = getattr(draft, "extra_ids", None)  # [b, S] | None
    if extra is None:
        return logits, draft.vocab
    return over_target(logits, draft.vocab, extra[:, 1:W + 1].to(logits.device), draft.target_vocab_size), None
