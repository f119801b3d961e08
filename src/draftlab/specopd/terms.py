"""One update's objective for each arm of the SpecOPD comparison (plain torch; Lightning calls these).

All arms return `Terms` (numerator, count) so the caller can sum both across ranks before dividing;
α is the overlap at the sampling temperature T (`draftlab.specopd.loss.overlap`):
- `specopd_terms`: trunk pass -> drafter blocks at the anchors (q, with gradients) -> fresh
  branches sampled from q at T -> packed tree scoring (p) -> E2E-TV. `first_rejection=True` is the
  ablation supervising only up to and including the first position the target rejects under the rule
  matching T (the speculative-sampling test on the branch's own draws, uniforms from its own seeded
  stream), each branch keeping its full W_b in the weighting.
- `offpolicy_tv_terms`: the same loss on the reference continuation x_{a+1..a+W} (p = the trunk's
  own logits, no tree rows).
- `draft_opd_terms`: the Draft-OPD-style loop (`draft_opd.draft_opd_rollout`), then E2E-TV over
  its rounds.
(The off-policy CE baseline is pretraining's own step: `PretrainModule.training_step`.)
`chunk_rows` > 0 (every arm): the drafter's q logits, the target's p logits, the branch sampling, the
acceptance tests and the overlaps run that many draft positions at a time (`chunked_*`; the backward
recomputes each chunk). The target's passes keep final-normed hidden states ([B, L, H], [B, A, W, H]) and
its head runs per chunk, so no [rows, V] tensor outlives its chunk (the sequential arm's rollout still
records its p logits [B, R, W, V]: R rounds, not A branches).
Every arm reads the drafter's q through `draftlab.specopd.slots` (`block_rows` -> hidden rows + their seeds,
`slot_logits` -> (logits, vocab)), so on a seeded drafter the seeded block input, the seed bias and the seed
column are those the engine proposes with; on a plain drafter that is `drafter.logits(hidden)` as before.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from draftlab.decoding.verify import SamplingParams, greedy_accept_length, process_logits, proposal_prob
from draftlab.kernels.chunked import map_rows
from draftlab.specopd.loss import e2e_tv_terms, expected_accept, first_rejection_mask, overlap
from draftlab.specopd.draft_opd import draft_opd_rollout
from draftlab.specopd.slots import block_rows, row_keys, slot_logits
from draftlab.specopd.tree import (
    ACCEPT_STREAM, branch_lengths, branch_target_hidden, branch_target_logits, branch_uniforms, prefix_mask,
    reference_branches, sample_branches, trunk_pass,
)


@dataclass
class Terms:
    numerator: Tensor  # Σ over valid branches of (1 − (1/W_b) Σ_i Π_{j≤i} α_j); carries the gradient
    count: Tensor  # number of valid branches
    positions: int  # supervised draft positions
    mean_alpha: float  # mean overlap over supervised positions
    accept_prefix: float  # mean greedy-accepted prefix length of the branches (on-policy acceptance)
    expected_accept: float = 0.0  # Σ over branches of Σ_{i ≤ W_b} Π_{j≤i} α_j (all positions, the T=1 surrogate)


def block_hidden(drafter, feats: Tensor, ctx_valid: Tensor, ids: Tensor, anchors: Tensor, W: int) -> Tensor:
    """Drafter hidden states of slots 1..W of the block at every anchor: [B, A, W, H] (with gradients)."""
    return block_rows(drafter, feats, ctx_valid, ids, anchors, W)[0]


def block_q(drafter, feats: Tensor, ctx_valid: Tensor, ids: Tensor, anchors: Tensor, W: int,
            lengths: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
    """The drafter's proposal logits at slots 1..W of the block at every anchor and their vocabulary:
    ([B, A, W, Vq] with gradients, vocab [Vq] | None), `slots.slot_logits` of `slots.block_rows`."""
    return slot_logits(drafter, *block_rows(drafter, feats, ctx_valid, ids, anchors, W, lengths))


def block_q_logits(drafter, feats: Tensor, ctx_valid: Tensor, ids: Tensor, anchors: Tensor, W: int) -> Tensor:
    """`block_q`'s logits alone: [B, A, W, Vq] (with gradients)."""
    return block_q(drafter, feats, ctx_valid, ids, anchors, W)[0]


# ---- row chunks: the [rows, V] logits exist one chunk at a time (`kernels.chunked.map_rows`) ---------------------
# p_rows [B, A, W, X] are the target's final-normed hidden states when p_head (the target's head) is given,
# else its logits; q comes from the drafter's hidden states [B, A, W, H] (and, when its head reads them, the
# rows' seeds [B, A, W]: `slots.row_keys` carries seeds + slot indices through the chunks).


def _p(p_head, rows: Tensor) -> Tensor:
    return rows if p_head is None else p_head(rows)


def _q(drafter, h: Tensor, keys: tuple, vocab) -> tuple[Tensor, Tensor | None]:
    """(q logits, vocab) of one chunk of hidden rows h [c, H] with its row keys (() = no seeds: `vocab`)."""
    return slot_logits(drafter, h, *keys) if keys else (drafter.logits(h), vocab)


def chunked_overlap(drafter, hidden: Tensor, p_rows: Tensor, vocab, backend, temperature: float, chunk: int,
                    p_head=None, seeds: Tensor | None = None) -> Tensor:
    """α [B, A, W] from hidden [B, A, W, H] (seeds [B, A, W]: theirs, when the head reads them) and p_rows:
    q logits, p logits, both softmaxes and the overlap computed `chunk` rows at a time (checkpointed:
    recomputed in backward)."""
    def fn(h, p, *k):  # [c]
        q, v = _q(drafter, h, k, vocab)
        return overlap(q, _p(p_head, p), v, backend, temperature)
    return map_rows(fn, chunk, hidden.flatten(0, -2), p_rows.detach().flatten(0, -2), *row_keys(seeds)).view(
        hidden.shape[:-1])


@torch.no_grad()
def chunked_branches(drafter, hidden: Tensor, u: Tensor, temperature: float, chunk: int, vocab_chunk: int,
                     seeds: Tensor | None = None) -> Tensor:
    """Branch tokens [B, A, W] sampled from q with uniforms u [B, A, W], `chunk` rows at a time."""
    def fn(h, uu, *k):
        q, v = _q(drafter, h, k, drafter.draft_vocab)
        return sample_branches(q, uu, temperature, v, vocab_chunk)
    return map_rows(fn, chunk, hidden.detach().flatten(0, -2), u.to(hidden.device).flatten(), *row_keys(seeds)).view(
        u.shape)


@torch.no_grad()
def chunked_token_probs(drafter, hidden: Tensor, p_rows: Tensor, branch: Tensor, temperature: float,
                        chunk: int, p_head=None, seeds: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """(q^T, p^T) at each branch token, [B, A, W] each, `chunk` rows at a time (the acceptance tests)."""
    sp = SamplingParams(temperature)
    y = branch.flatten()

    def q_at(h, t, *k):
        q, v = _q(drafter, h, k, drafter.draft_vocab)
        return proposal_prob(process_logits(q, sp), t, v)
    q = map_rows(q_at, chunk, hidden.detach().flatten(0, -2), y, *row_keys(seeds))
    p = map_rows(lambda pr, t: process_logits(_p(p_head, pr), sp).gather(-1, t[:, None]).squeeze(-1), chunk,
                 p_rows.flatten(0, -2), y)
    return q.view_as(branch), p.view_as(branch)


@torch.no_grad()
def chunked_argmax(p_rows: Tensor, chunk: int, p_head=None) -> Tensor:
    """The target's greedy token at every branch position [B, A, W], `chunk` rows at a time."""
    return map_rows(lambda pr: _p(p_head, pr).argmax(-1), chunk, p_rows.flatten(0, -2)).view(p_rows.shape[:-1])


def _terms(q_logits: Tensor, p_logits: Tensor, branch: Tensor, valid: Tensor, vocab, backend,
           temperature: float = 1.0, supervised: Tensor | None = None) -> Terms:
    """valid [B, A, W]: the branches' positions (W_b); supervised: the positions the loss reads (default: all)."""
    return _from_alpha(overlap(q_logits, p_logits, vocab, backend, temperature), p_logits.argmax(-1), branch, valid,
                       supervised)


def _from_alpha(alpha: Tensor, p_greedy: Tensor, branch: Tensor, valid: Tensor,
                supervised: Tensor | None = None) -> Terms:
    """The terms from the overlaps α [B, A, W] (with gradients) and the target's greedy tokens [B, A, W]."""
    sup = valid if supervised is None else supervised
    num, cnt = e2e_tv_terms(alpha, sup, valid.sum(-1))
    with torch.no_grad():
        n = int(sup.sum())
        acc = greedy_accept_length(branch, p_greedy, valid)  # [B, A]
        has = valid.any(-1)
        return Terms(num, cnt, n, float(alpha[sup].mean()) if n else float("nan"),
                     float(acc[has].float().mean()) if bool(has.any()) else float("nan"),
                     float(expected_accept(alpha.detach(), valid).sum()))


def specopd_terms(target, drafter, batch: dict, W: int, temperature: float = 1.0, seed: int = 0, step: int = 0,
                  first_rejection: bool = False, backend: str | None = None, chunk_rows: int = 0,
                  vocab_chunk: int = 0) -> Terms:
    """batch: ids [B, L] (right-padded references), seq_len [B], anchors [B, A], anchor_valid [B, A],
    seq [B] (sequence ids: key the branches' sampling streams). chunk_rows > 0: the q and p logits, sampling,
    acceptance tests and overlaps run `chunk_rows` draft positions at a time; vocab_chunk > 0: branch
    sampling by the chunked inverse CDF (`tree.sample_branches`)."""
    ids, seq_len, anchors = batch["ids"], batch["seq_len"], batch["anchors"]
    # K/V + taps + logits (chunked: final-normed hidden states, the head runs per chunk), once
    trunk = trunk_pass(target, ids, seq_len, drafter.target_layer_ids, hidden_only=chunk_rows > 0)
    if chunk_rows > 0:
        return _specopd_chunked(target, drafter, batch, trunk, W, temperature, seed, step, first_rejection, backend,
                                chunk_rows, vocab_chunk)
    q_logits, vocab = block_q(drafter, trunk.taps, trunk.valid, ids, anchors, W, seq_len)  # [B, A, W, Vq], [Vq]|None
    u = branch_uniforms(seed, step, batch["seq"].cpu(), anchors.cpu(), W)  # [B, A, W] per-branch streams
    branch = sample_branches(q_logits.detach(), u, temperature, vocab, vocab_chunk)  # [B, A, W] fresh samples
    lengths = branch_lengths(anchors, batch["anchor_valid"], seq_len, W)  # [B, A] W_b
    valid = prefix_mask(lengths, W)  # [B, A, W]
    p_logits = branch_target_logits(target, trunk, anchors, branch, lengths)  # [B, A, W, V], no grad
    sup = None
    if first_rejection:  # the acceptance tests draw from the branch's own second stream
        ua = branch_uniforms(seed, step, batch["seq"].cpu(), anchors.cpu(), W, ACCEPT_STREAM)  # [B, A, W]
        sup = first_rejection_mask(branch, p_logits, valid, temperature, q_logits.detach(), vocab, ua)
    return _terms(q_logits, p_logits, branch, valid, vocab, backend, temperature, sup)


def _specopd_chunked(target, drafter, batch: dict, trunk, W: int, temperature: float, seed: int, step: int,
                     first_rejection: bool, backend, chunk: int, vocab_chunk: int) -> Terms:
    """`specopd_terms` with every [rows, V] tensor (the drafter's q, the target's p) held one row chunk at a
    time: the target's branch rows stay final-normed hidden states [B, A, W, H] and `target.head` runs per chunk."""
    if temperature <= 0:  # as `overlap` would, before any work
        raise ValueError(f"the E2E-TV overlap needs a sampling temperature > 0 (got {temperature})")
    ids, seq_len, anchors = batch["ids"], batch["seq_len"], batch["anchors"]
    hidden, seeds = block_rows(drafter, trunk.taps, trunk.valid, ids, anchors, W, seq_len)  # [B, A, W, H], [B, A, W]|None
    u = branch_uniforms(seed, step, batch["seq"].cpu(), anchors.cpu(), W)  # [B, A, W]
    branch = chunked_branches(drafter, hidden, u, temperature, chunk, vocab_chunk, seeds)  # [B, A, W]
    lengths = branch_lengths(anchors, batch["anchor_valid"], seq_len, W)
    valid = prefix_mask(lengths, W)
    p_hidden = branch_target_hidden(target, trunk, anchors, branch, lengths)  # [B, A, W, H_target], no grad
    head = target.head
    p_greedy = chunked_argmax(p_hidden, chunk, head)  # [B, A, W]
    sup = None
    if first_rejection:  # temperature > 0: the speculative-sampling test
        ua = branch_uniforms(seed, step, batch["seq"].cpu(), anchors.cpu(), W, ACCEPT_STREAM)
        q_tok, p_tok = chunked_token_probs(drafter, hidden, p_hidden, branch, temperature, chunk, head, seeds)
        sup = first_rejection_mask(branch, None, valid, temperature, None, None, ua, q_tok, p_tok)
    alpha = chunked_overlap(drafter, hidden, p_hidden, drafter.draft_vocab, backend, temperature, chunk, head, seeds)
    return _from_alpha(alpha, p_greedy, branch, valid, sup)


def offpolicy_tv_terms(target, drafter, batch: dict, W: int, backend: str | None = None,
                       temperature: float = 1.0, chunk_rows: int = 0) -> Terms:
    """E2E-TV on the reference tokens: p_{b,i} = trunk row a_b+i−1 (teacher forcing)."""
    ids, seq_len, anchors = batch["ids"], batch["seq_len"], batch["anchors"]
    trunk = trunk_pass(target, ids, seq_len, drafter.target_layer_ids, hidden_only=chunk_rows > 0)
    hidden, seeds = block_rows(drafter, trunk.taps, trunk.valid, ids, anchors, W, seq_len)  # [B, A, W, H], [B, A, W]|None
    branch = reference_branches(ids, anchors, W)  # [B, A, W]
    lengths = branch_lengths(anchors, batch["anchor_valid"], seq_len, W)
    valid = prefix_mask(lengths, W)
    src = trunk.logits if chunk_rows <= 0 else trunk.hidden  # [B, L, V] or, chunked, [B, L, H_target]
    L, X = src.shape[1], src.shape[2]
    rows = (anchors[..., None] + torch.arange(W, device=anchors.device)).clamp(max=L - 1)  # [B, A, W]
    p_rows = src.gather(1, rows.flatten(1)[..., None].expand(-1, -1, X)).view(*rows.shape, X)
    if chunk_rows > 0:
        head = target.head
        alpha = chunked_overlap(drafter, hidden, p_rows, drafter.draft_vocab, backend, temperature, chunk_rows, head,
                                seeds)
        return _from_alpha(alpha, chunked_argmax(p_rows, chunk_rows, head), branch, valid)
    q_logits, vocab = slot_logits(drafter, hidden, seeds)  # [B, A, W, Vq], [Vq] | None
    return _terms(q_logits, p_rows, branch, valid, vocab, backend, temperature)


def draft_opd_terms(target, drafter, batch: dict, W: int, rounds: int, temperature: float = 1.0, seed: int = 0,
                     step: int = 0, eos_ids: list[int] = (), backend: str | None = None, chunk_rows: int = 0,
                     vocab_chunk: int = 0) -> Terms:
    """Each sequence of the batch starts a stream at its first anchor (the reference prefix x_{≤a_0})."""
    keep = batch["anchor_valid"][:, 0].nonzero().squeeze(-1).tolist()
    ids, a0 = batch["ids"], batch["anchors"][:, 0]
    prefixes = [ids[b, : int(a0[b]) + 1].tolist() for b in keep]
    seq_ids = [int(batch["seq"][b]) for b in keep]
    ro = draft_opd_rollout(target, drafter, prefixes, rounds, W, temperature, seed, step, seq_ids, eos_ids,
                           vocab_chunk=vocab_chunk)
    ctx_valid = torch.arange(ro.ids.shape[1], device=ro.ids.device)[None, :] < ro.seq_len[:, None]
    # the rounds' blocks again (a seeded drafter: the seeds of the committed text, as its rollout state had them)
    hidden, seeds = block_rows(drafter, ro.feats, ctx_valid, ro.ids, ro.anchors, W, ro.seq_len)  # [B, R, W, H]
    valid = ro.anchor_valid[..., None].expand(-1, -1, W)
    if chunk_rows > 0:
        alpha = chunked_overlap(drafter, hidden, ro.p_logits, drafter.draft_vocab, backend, temperature, chunk_rows,
                                seeds=seeds)
        return _from_alpha(alpha, ro.p_logits.argmax(-1), ro.branch, valid)
    q_logits, vocab = slot_logits(drafter, hidden, seeds)  # [B, R, W, Vq], [Vq] | None
    return _terms(q_logits, ro.p_logits, ro.branch, valid, vocab, backend, temperature)
