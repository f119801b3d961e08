"""SpecOPD proposal trees (docs/algorithms.md "Proposal tree", "Packed scoring"): anchors, on-policy branches,
packed target scoring.

- Trunk: the reference sequence x (prompt + response), right-padded in a batch.
- Anchors a_b: random positions of the response part, a_b ∈ [P, L−2] (P = prompt length). Slot 0 of
  the drafter block at a_b is x_{a_b}; the branch y_{b,1..W} sits at logical positions a_b+1..a_b+W.
  A branch that would run past the end of the reference is cut to W_b = min(W, L−1−a_b) tokens.
- Branch sampling: one drafter pass per anchor block (all anchors of a sequence in one
  `forward_train`), then slot by slot y_{b,i} ~ q_θ(· | x_{≤a_b}) (DFlash slots are MASK inputs — a
  seeded drafter's: its seeds of x_{≤a_b}, then MASK — so the pass gives every slot's distribution at once;
  `slots` gives that q as the engine proposes from it). Each branch draws from its own stream,
  keyed by (seed, step, sequence id, anchor): samples do not depend on batch composition or rank.
- Packed scoring: one trunk pass fills the target's K/V (and returns the drafter's context taps and
  the trunk logits); then `draftlab.verifier.tree.score_tree` appends the W−1 rows of every branch
  with the tree mask. Read rule: p_{b,1} = trunk row a_b; p_{b,i+1} = branch row i (i = 1..W−1).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from draftlab.drafter.masks import sample_anchors
from draftlab.specopd.sampling import sample_rows_chunked
from draftlab.verifier.model import causal_mask
from draftlab.verifier.tree import score_tree


# ---- anchors ----------------------------------------------------------------------------------------


def branch_anchor_range(seq_len: int, prompt_len: int) -> tuple[int, int]:
    """Anchors of branches with at least one token: [max(P, 1), L−2] inclusive (hi < lo: none)."""
    return max(prompt_len, 1), seq_len - 2


def sample_branch_anchors(seq_len: int, prompt_len: int, n: int, generator: torch.Generator | None = None) -> Tensor:
    """Up to n distinct random anchors (sorted) in the response part; [<=n] long. The branch range
    [max(P, 1), L−2] is the drafter's valid-anchor range of a 2-slot block (x_a + one token), so the
    drafter's sampler draws them (same range, same random stream)."""
    return sample_anchors(seq_len, prompt_len, 2, n, generator)


def branch_lengths(anchors: Tensor, anchor_valid: Tensor, seq_len: Tensor, W: int) -> Tensor:
    """W_b = min(W, L−1−a_b) (0 for padding anchors); anchors [B, A], seq_len [B] -> [B, A] long."""
    room = seq_len[:, None] - 1 - anchors  # [B, A]
    return torch.where(anchor_valid, room.clamp(min=0, max=W), torch.zeros_like(room))


def prefix_mask(lengths: Tensor, W: int) -> Tensor:
    """[..., W] bool: position i (0-based) exists iff i < W_b."""
    return torch.arange(W, device=lengths.device) < lengths[..., None]


# ---- sampling -------------------------------------------------------------------------------------------


SAMPLE_STREAM, ACCEPT_STREAM = 0, 1  # a branch's draws of its tokens / of its acceptance tests


def branch_seed(seed: int, step: int, seq_id: int, anchor: int, stream: int = SAMPLE_STREAM) -> int:
    """A 63-bit key of one branch's random stream (deterministic across processes); `stream` separates
    the uniforms that sample its tokens from those of its acceptance tests."""
    h = (seed * 0x9E3779B97F4A7C15) ^ (step * 0xBF58476D1CE4E5B9) ^ (seq_id * 0x94D049BB133111EB) ^ (anchor * 0xD6E8FEB86659FD93)
    h ^= stream * 0xA0761D6478BD642F
    h ^= h >> 31
    return (h * 0x2545F4914F6CDD1D) & ((1 << 63) - 1)


def branch_uniforms(seed: int, step: int, seq_ids: Tensor, anchors: Tensor, W: int, stream: int = SAMPLE_STREAM) -> Tensor:
    """u [B, A, W] in [0, 1): W draws from each branch's own generator stream."""
    B, A = anchors.shape
    u = torch.empty(B, A, W, dtype=torch.float64)
    for b, s in enumerate(seq_ids.tolist()):
        for a, pos in enumerate(anchors[b].tolist()):
            g = torch.Generator().manual_seed(branch_seed(seed, step, int(s), int(pos), stream))
            u[b, a] = torch.rand(W, generator=g, dtype=torch.float64)
    return u


def sample_from(probs: Tensor, u: Tensor) -> Tensor:
    """Inverse-CDF sampling: probs [..., V], u [...] in [0, 1) -> indices [...] long."""
    cdf = probs.double().cumsum(-1)  # [..., V]
    idx = torch.searchsorted(cdf, (u.to(cdf) * cdf[..., -1])[..., None], right=True).squeeze(-1)
    return idx.clamp(max=probs.shape[-1] - 1)


@torch.no_grad()
def sample_branches(q_logits: Tensor, u: Tensor, temperature: float = 1.0, vocab: Tensor | None = None,
                    vocab_chunk: int = 0) -> Tensor:
    """q_logits [B, A, W, Vq] (drafter slots 1..W), u [B, A, W] -> branch tokens [B, A, W] (target ids).
    Slot by slot: y_{b,i} ~ softmax(q_logits_{b,i} / T); T = 0 takes the argmax. vocab_chunk > 0: the
    fixed-point inverse CDF over `vocab_chunk`-column chunks (`sampling.sample_rows_chunked`: the same
    uniforms, the same tokens, no [.., Vq] float64 tensor); 0: one fp32 softmax + float64 cumsum."""
    if temperature <= 0:
        idx = q_logits.argmax(-1)
    elif vocab_chunk > 0:
        flat = q_logits.reshape(-1, q_logits.shape[-1])  # [N, Vq]
        idx = sample_rows_chunked(flat, u.reshape(-1), temperature, vocab_chunk).view(q_logits.shape[:-1])
    else:
        idx = sample_from((q_logits.float() / temperature).softmax(-1), u.to(q_logits.device))
    return idx if vocab is None else vocab[idx]


# ---- packed scoring ---------------------------------------------------------------------------------------


@dataclass
class Trunk:
    cache: object  # the target's KV cache holding the trunk (restored after every score_tree)
    valid: Tensor  # [B, L] bool (right padding = False)
    logits: Tensor | None  # [B, L, V] fp32: row t scores x_{t+1} (None from a hidden_only pass)
    taps: Tensor | None  # [B, L, n_taps*H] the drafter's context features, from the same pass
    hidden: Tensor | None = None  # [B, L, H] final-normed states (hidden_only): target.head(hidden) = logits


@torch.no_grad()
def trunk_pass(target, ids: Tensor, seq_len: Tensor, taps: list[int] | tuple[int, ...] = (),
               hidden_only: bool = False) -> Trunk:
    """One causal target pass over the right-padded references ids [B, L]; keeps its K/V. hidden_only:
    keep the final-normed hidden states [B, L, H] instead of the [B, L, V] logits."""
    B, L = ids.shape
    dev = target.device
    ids = ids.to(dev)
    valid = torch.arange(L, device=dev)[None, :] < seq_len.to(dev)[:, None]  # [B, L]
    cache = target.new_cache()
    mask = causal_mask(torch.zeros(B, 0, dtype=torch.bool, device=dev), L, valid)  # [B, L, L]
    out = target(ids, cache=cache, position_ids=torch.arange(L, device=dev).expand(B, L), mask=mask, taps=taps,
                 hidden_only=hidden_only)
    return Trunk(cache, valid, out.logits, out.taps, out.hidden)


def _branch_rows(target, trunk: Trunk, anchors: Tensor, branch: Tensor, lengths: Tensor, hidden: bool) -> Tensor:
    """The read rule over a trunk: row 0 of a branch is the trunk row at its anchor, rows 1..W-1 the packed
    branch rows; [B, A, W, V] logits, or [B, A, W, H] final-normed states with hidden=True."""
    B, A, W = branch.shape
    src = trunk.hidden if hidden else trunk.logits  # [B, L, H | V]
    dev = src.device
    anchors, branch, lengths = anchors.to(dev), branch.to(dev), lengths.to(dev)
    first = src.gather(1, anchors[..., None].expand(B, A, src.shape[-1]))  # [B, A, H | V]  read rule: anchor row
    if W == 1:
        return first[:, :, None]
    rows_valid = torch.arange(1, W, device=dev) < lengths[..., None]  # [B, A, W-1]: row i scores y_{i+1}
    out = score_tree(target, trunk.cache, trunk.valid, anchors, branch[:, :, : W - 1], rows_valid, hidden_only=hidden)
    return torch.cat([first[:, :, None], out.hidden if hidden else out.logits], dim=2)  # [B, A, W, H | V]


@torch.no_grad()
def branch_target_logits(target, trunk: Trunk, anchors: Tensor, branch: Tensor, lengths: Tensor) -> Tensor:
    """Target logits for every branch token: anchors [B, A], branch [B, A, W] target ids, lengths [B, A].
    Returns p_logits [B, A, W, V]: [:, :, 0] is the trunk row at the anchor (scores y_1), [:, :, i] the
    packed branch row i (token y_i at position a+i; scores y_{i+1}). Only W−1 new rows per branch."""
    return _branch_rows(target, trunk, anchors, branch, lengths, hidden=False)


@torch.no_grad()
def branch_target_hidden(target, trunk: Trunk, anchors: Tensor, branch: Tensor, lengths: Tensor) -> Tensor:
    """`branch_target_logits` before the head, from a hidden_only trunk: [B, A, W, H] final-normed states
    (target.head of row i = p_logits[:, :, i]); [B, A, W, V] never exists."""
    return _branch_rows(target, trunk, anchors, branch, lengths, hidden=True)


def reference_branches(ids: Tensor, anchors: Tensor, W: int) -> Tensor:
    """The reference continuation x_{a+1..a+W} as a 'branch' (off-policy baseline); [B, A, W]."""
    L = ids.shape[1]
    pos = anchors[..., None] + torch.arange(1, W + 1, device=anchors.device)  # [B, A, W]
    return ids.gather(1, pos.clamp(max=L - 1).flatten(1)).view_as(pos)
