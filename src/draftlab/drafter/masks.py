"""Block masks, anchors, labels and loss weights of the DFlash drafter (docs/algorithms.md "DFlash").

Conventions (the classic bugs of this drafter family live here, so they are spelled out once):
- A *block* starts at an *anchor* position `a` of the sequence. Its S slots carry the ids
  `[x_a, MASK, ..., MASK]` at logical positions `a, a+1, ..., a+S-1` (a seeded drafter,
  docs/algorithms.md "Seeded block drafting": `[x_a, s_1..s_m, MASK, ...]` with the seeds of `draftlab.ngram`,
  built from x_{<=a} only).
- Same-position labels: slot k predicts token `x_{a+k}`; slot 0 (the known token) carries no loss.
- Context: the block sees the target's tap features of positions strictly before the anchor
  (`j < a`), attends bidirectionally inside itself and never sees another block.
- Loss weight of slot k >= 1: `exp(-(k-1)/gamma)`, normalised by the weight sum over the batch.
"""
from __future__ import annotations

import torch
from torch import Tensor

CONVENTION = "same-position"


def default_gamma(block_size: int) -> float:
    """DFlash's decay: 7 / 5 / 4 for S = 16 / 10 / 8; other sizes interpolate linearly in S
    (S <= 8 -> 4), which reproduces the three published points."""
    table = {16: 7.0, 10: 5.0, 8: 4.0}
    if block_size in table:
        return table[block_size]
    if block_size < 8:
        return 4.0
    if block_size < 10:
        return 4.0 + (block_size - 8) * 0.5
    return 5.0 + (block_size - 10) / 3.0


def slot_weights(block_size: int, gamma: float, device=None) -> Tensor:
    """[S] float: 0 for slot 0, exp(-(k-1)/gamma) for slot k >= 1."""
    k = torch.arange(block_size, dtype=torch.float32, device=device)
    w = torch.exp(-(k - 1) / gamma)
    w[0] = 0.0
    return w


def valid_anchor_range(seq_len: int, prompt_len: int, block_size: int) -> tuple[int, int]:
    """Anchors lie in response positions that leave room for a full block: [prompt_len, seq_len-S].
    Returns (lo, hi) inclusive; hi < lo means none."""
    return max(prompt_len, 1), seq_len - block_size


def sample_anchors(seq_len: int, prompt_len: int, block_size: int, n: int, generator: torch.Generator | None = None) -> Tensor:
    """Up to n distinct random anchors (sorted) among the valid ones; [<=n] long."""
    lo, hi = valid_anchor_range(seq_len, prompt_len, block_size)
    if hi < lo:
        return torch.zeros(0, dtype=torch.long)
    count = hi - lo + 1
    if count <= n:
        return torch.arange(lo, hi + 1)
    return (torch.randperm(count, generator=generator)[:n] + lo).sort().values


def strided_anchors(seq_len: int, prompt_len: int, block_size: int, stride: int) -> Tensor:
    """Deterministic validation anchors: every stride-th valid anchor; [m] long."""
    lo, hi = valid_anchor_range(seq_len, prompt_len, block_size)
    if hi < lo:
        return torch.zeros(0, dtype=torch.long)
    return torch.arange(lo, hi + 1, stride)


def block_positions(anchors: Tensor, block_size: int) -> Tensor:
    """anchors [..., A] -> logical positions [..., A, S] (a + k)."""
    return anchors[..., None] + torch.arange(block_size, device=anchors.device)


def block_input_ids(input_ids: Tensor, anchors: Tensor, block_size: int, mask_token_id: int,
                    seeds: Tensor | None = None) -> Tensor:
    """input_ids [B, L], anchors [B, A] -> block ids [B, A, S] = [x_a, MASK, ..., MASK]; with seeds
    [B, A, S-1] (a seeded drafter, docs/algorithms.md "Seeded block drafting": MASK-filled where no seed)
    = [x_a, seeds]."""
    B, A = anchors.shape
    ids = torch.full((B, A, block_size), mask_token_id, dtype=torch.long, device=input_ids.device)
    ids[:, :, 0] = input_ids.gather(1, anchors)
    if seeds is not None:
        ids[:, :, 1:] = seeds.to(ids.device)
    return ids


def block_labels(input_ids: Tensor, anchors: Tensor, block_size: int, seq_len: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Same-position labels. input_ids [B, L], anchors [B, A] -> (labels [B, A, S] with
    labels[b, i, k] = x_{a_i + k}, in_range [B, A, S] bool: a_i + k < seq_len[b]; slot 0 is marked
    out of range because it carries no loss)."""
    B, L = input_ids.shape
    pos = block_positions(anchors, block_size)  # [B, A, S]
    lim = seq_len if seq_len is not None else torch.full((B,), L, dtype=torch.long, device=input_ids.device)
    in_range = pos < lim[:, None, None]
    labels = input_ids.gather(1, pos.clamp(max=L - 1).reshape(B, -1)).view_as(pos)
    in_range[..., 0] = False
    return labels, in_range


def context_mask(anchors: Tensor, ctx_valid: Tensor) -> Tensor:
    """Which context positions each block may see: anchors [B, A], ctx_valid [B, L] bool ->
    [B, A, L] bool, True where j < a_i and position j is valid."""
    L = ctx_valid.shape[1]
    j = torch.arange(L, device=anchors.device)
    return (j[None, None, :] < anchors[:, :, None]) & ctx_valid[:, None, :]


def dense_block_mask(anchors: Tensor, ctx_valid: Tensor, block_size: int) -> Tensor:
    """The full attention mask of the multi-anchor forward, for inspection and tests:
    [B, A*S, L + A*S] bool over keys [context; all blocks' slots]. The model never builds it
    (it attends to context and to its own block separately), but it is exactly what it computes."""
    B, A = anchors.shape
    S = block_size
    ctx = context_mask(anchors, ctx_valid)  # [B, A, L]
    ctx = ctx[:, :, None, :].expand(B, A, S, ctx.shape[-1]).reshape(B, A * S, -1)
    blk = torch.eye(A, dtype=torch.bool, device=anchors.device)  # same block only
    blk = blk[:, None, :, None].expand(A, S, A, S).reshape(A * S, A * S)
    return torch.cat([ctx, blk[None].expand(B, -1, -1)], dim=-1)



def greedy_block_labels(ids: Tensor, greedy: Tensor, anchors: Tensor, block_size: int,
                        seq_len: Tensor) -> tuple[Tensor, Tensor]:
    """Labels from the target's greedy tokens under teacher forcing, exact for any text.
    ids, greedy [B, T] (greedy[t] = the target's argmax given ids[<t], -1 unknown), anchors [B, A] ->
    (labels [B, A, S], valid [B, A, S]): slot k's label is greedy[a+k]; it is what greedy decoding
    would produce only while the text agrees with the target's tokens at a+1..a+k-1, so later slots
    are valid only under that agreement. Slot 0 carries no loss. On the target's own greedy
    references this equals `block_labels`; on human text (prompts) it keeps only the exact labels."""
    B, T = ids.shape
    pos = block_positions(anchors, block_size)  # [B, A, S]
    flat = pos.clamp(max=T - 1).reshape(B, -1)
    lab = greedy.gather(1, flat).view_as(pos)
    agree = ids.gather(1, flat).view_as(pos) == lab  # [B, A, S]
    agree[..., 0] = True
    prefix_ok = torch.ones_like(agree)
    prefix_ok[..., 1:] = agree[..., :-1].cumprod(-1).bool()  # slot k: agreement at slots 1..k-1
    valid = (pos < seq_len[:, None, None]) & (lab >= 0) & prefix_ok
    valid[..., 0] = False
    return lab.clamp(min=0), valid
