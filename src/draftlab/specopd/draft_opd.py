"""The Draft-OPD-style sequential on-policy rollout, SpecOPD's throughput baseline (docs/algorithms.md "SpecOPD";
the `sequential` objective of the comparison).

Per stream, starting from a reference prefix x_{≤a_0}: prefill the target on x_{<a_0} (context taps),
then `rounds` dependent rounds of the engine's own `draftlab.decoding.round.speculative_round`:
    draft   one drafter pass over [slot 0, MASK…] (slot 0 = last committed token; a seeded drafter: its seeds first);
    propose W tokens sampled from q slot by slot (per-round generator streams, as in
            `tree.branch_uniforms`): the `BranchSampler` proposal step;
    verify  one target pass over [slot 0, y_1..y_W] -> p for every drafted token (row i scores y_{i+1});
    commit  the verification rule matching the drafting temperature T decides the accepted prefix (T > 0:
            speculative sampling, min(1, p^T/q^T) with the q the tokens were drawn from and a seeded
            generator per update; T = 0: greedy); slot 0 and the accepted tokens join the context (their
            taps come from the verify pass), the target's bonus / replacement token becomes the next
            slot 0 — so the accepted prefix decides where the next round starts.
Collection runs without gradients; the update then recomputes q for every round in one
`forward_train` over the committed sequence (anchors = the rounds' slot-0 positions, context = the
committed tokens before them — exactly what the drafter saw while drafting) and applies E2E-TV.
A seeded drafter (docs/algorithms.md "Seeded block drafting") is driven as the engine drives it: its state tracks each
stream's committed text (`TracksStreams`: start after prefill, extend after every round), so each round's block carries
the seeds of that text, the very seeds the update's `forward_train` recomputes from the committed sequence; the proposal
reads the draft's seed bias and seed column (`slots.draft_slot_logits`).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from draftlab.decoding.api import Proposal, TracksStreams
from draftlab.decoding.round import speculative_round, tap_ids, valid_positions
from draftlab.decoding.verify import SamplingParams, process_logits
from draftlab.specopd.slots import draft_slot_logits
from draftlab.specopd.tree import ACCEPT_STREAM, branch_seed, branch_uniforms, sample_branches
from draftlab.verifier.streams import StreamCache, capacity_for


@dataclass
class Rollout:
    ids: Tensor  # [B, T] committed tokens (right-padded)
    seq_len: Tensor  # [B]
    feats: Tensor  # [B, T, n_taps*H] target taps of the committed tokens (logical position = index)
    anchors: Tensor  # [B, R] logical position of each round's slot 0
    anchor_valid: Tensor  # [B, R] False after a stream emitted EOS
    branch: Tensor  # [B, R, W] drafted (sampled) tokens
    p_logits: Tensor  # [B, R, W, V] target logits for each drafted token
    accepted: Tensor  # [B, R] accepted prefix length per round


class BranchSampler:
    """Proposal step of the rollout: W tokens sampled from the draft's q at slots 1..W with the given
    uniforms u [b, 1, W] (`tree.sample_branches`: the same sampling as SpecOPD's branches), handed to the
    verifier with the q they were drawn from (q [b, W, Vq] over the draft vocabulary, or over the target
    vocabulary with a seed column: `slots.draft_slot_logits`; none at T=0)."""

    def __init__(self, u: Tensor, W: int, temperature: float, vocab_chunk: int = 0):
        self.u, self.W, self.temperature, self.vocab_chunk = u, W, temperature, vocab_chunk

    def __call__(self, draft, sp=None, generator=None) -> Proposal:
        logits, vocab = draft_slot_logits(draft, self.W)  # [b, W, Vq], [Vq] | None
        y = sample_branches(logits[:, None], self.u, self.temperature, vocab, self.vocab_chunk)[:, 0]  # [b, W]
        if self.temperature <= 0:
            return Proposal(y)
        return Proposal(y, process_logits(logits, SamplingParams(self.temperature)), vocab)


@torch.no_grad()
def draft_opd_rollout(target, drafter, prefixes: list[list[int]], rounds: int, W: int, temperature: float = 1.0,
                      seed: int = 0, step: int = 0, seq_ids: list[int] | None = None, eos_ids: list[int] = (),
                      pad_id: int = 0, vocab_chunk: int = 0) -> Rollout:
    """Run `rounds` draft -> verify -> commit rounds for each prefix (len >= 2). Returns the record.
    vocab_chunk > 0: the proposals are drawn by the chunked inverse CDF (`tree.sample_branches`)."""
    dev, B, S = target.device, len(prefixes), drafter.block_size
    if not 1 <= W <= S - 1:
        raise ValueError(f"branch width {W} must lie in 1..{S - 1} (the drafter's proposals per block)")
    seq_ids = list(range(B)) if seq_ids is None else list(seq_ids)
    cap = capacity_for([len(p) for p in prefixes], rounds * (W + 1), S)
    sc = StreamCache(target, B, cap)
    state = drafter.new_state(B, cap)
    pre = sc.prefill([p[:-1] for p in prefixes], pad_id, taps=tap_ids(drafter))  # context = x_{<a_0}
    Tp = pre.taps.shape[1]
    tokens = [list(p[:-1]) for p in prefixes]
    feats = [[pre.taps[b, Tp - len(p) + 1:]] for b, p in enumerate(prefixes)]
    ctx = (pre.taps, sc.prompt_valid, valid_positions(sc.prompt_valid))
    last = torch.tensor([p[-1] for p in prefixes], device=dev)  # [B] slot 0
    tracks = isinstance(state, TracksStreams)  # a seeded drafter's state keeps the committed text (its seeds)
    if tracks:
        state.start([p[:-1] for p in prefixes], last)
    alive = torch.ones(B, dtype=torch.bool)
    eos = set(int(e) for e in eos_ids)
    sp = SamplingParams(max(temperature, 0.0))  # the rule matching the drafting temperature decides the prefix
    gen = torch.Generator(device=dev).manual_seed(branch_seed(seed, step, -1, -1, ACCEPT_STREAM))
    rec_anchor, rec_valid, rec_branch, rec_p, rec_acc = [], [], [], [], []
    for _ in range(rounds):
        pos0 = sc.next_pos[:, None]  # [B, 1] slot 0's logical position
        u = branch_uniforms(seed, step, torch.tensor(seq_ids), pos0.cpu(), W)  # [B, 1, W]
        r = speculative_round(sc, drafter, state, BranchSampler(u, W, temperature, vocab_chunk), last, ctx, sp, gen)
        y, v, acc = r.proposal.tokens, r.verified, r.result.accepted  # [B, W], logits [B, W+1, V], [B]
        rec_anchor.append(r.positions[:, 0].cpu())
        rec_valid.append(alive.clone())
        rec_branch.append(y.cpu())
        rec_p.append(v.logits[:, :W])  # [B, W, V]: row i scores y_{i+1}
        rec_acc.append(acc.cpu())
        if tracks:  # the committed tokens: the accepted proposals, then the bonus / replacement (the engine's rule)
            nxt = r.result.next_token[:, None]
            state.extend(torch.cat([y, nxt], 1).scatter(1, acc[:, None], nxt), acc + 1)
        for b, a in enumerate(r.accepted):
            kept = [int(last[b])] + y[b, :a].tolist()
            tokens[b] += kept
            feats[b].append(v.taps[b, :a + 1])
            if eos & set(kept + [int(r.result.next_token[b])]):
                alive[b] = False  # the response ended: later rounds are not supervised
        ctx = r.context
        last = r.result.next_token
    T = max(len(t) for t in tokens)
    F = pre.taps.shape[-1]
    ids = torch.full((B, T), pad_id, dtype=torch.long)
    ft = torch.zeros(B, T, F, dtype=pre.taps.dtype, device=dev)
    for b in range(B):
        ids[b, :len(tokens[b])] = torch.tensor(tokens[b])
        f = torch.cat(feats[b], 0)  # [len, F]
        ft[b, :f.shape[0]] = f
    return Rollout(ids=ids.to(dev), seq_len=torch.tensor([len(t) for t in tokens], device=dev), feats=ft,
                   anchors=torch.stack(rec_anchor, 1).to(dev), anchor_valid=torch.stack(rec_valid, 1).to(dev),
                   branch=torch.stack(rec_branch, 1).to(dev), p_logits=torch.stack(rec_p, 1),
                   accepted=torch.stack(rec_acc, 1))
