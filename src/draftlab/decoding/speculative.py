"""Speculative decoding with a parallel (DFlash-style) drafter, N ragged streams at once (SPEC §0–1).

Prefill the target on the prompts (with the drafter's taps) -> the first token -> rounds:

1. draft   feed the pending context features to the drafter, then draft the block
           [slot0 = last committed token, MASK × n] at positions next_pos + 0..n;
2. propose a pluggable `ProposalStep` turns the DraftOutput into n proposed tokens (+ optionally the
           distribution they were drawn from); identity = drafter argmax (T=0) / a sample of q (T>0);
           the engine sets `draft.block_ids` [B, S] (the block's input ids: slot 0 = last committed token);
           a deterministic proposal (q = None) is verified with the point-mass rule;
3. verify  one target pass over [slot0, proposals] (StreamCache.append with taps), then the one
           verification routine (`verify.verify_block`) gives acc and the bonus token;
4. book    keep slot0 + acc proposals in the target cache (the rest become holes), hand the verify
           pass's taps of those acc+1 positions to the drafter as the next context (no extra target
           pass), emit tokens, stop streams on EOS / max_new_tokens, drop finished streams, compact.

Drafter API used: new_state(B), extend_context(state, feats, valid, positions), draft(state, ids,
positions) -> DraftOutput(logits [B,S,Vd], hidden, vocab [Vd] | None, topk(K)), state.drop_streams(keep),
optional compact(state); attributes block_size, mask_token_id, target_layer_ids.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor

from draftlab.decoding.common import Clock, GenerationResult, Outputs, RoundRecord, drop_finished, maybe_compact
from draftlab.decoding.verify import SamplingParams, process_logits, sample, sample_next, verify_block
from draftlab.verifier import StreamCache
from draftlab.verifier.model import TargetModel

SPEC_PHASES = ("draft", "propose", "verify", "book")


@dataclass
class Proposal:
    tokens: Tensor  # [B, n] proposed target ids
    q: Tensor | None = None  # [B, n, Vq] distribution they were sampled from; None = deterministic
    q_vocab: Tensor | None = None  # [Vq] q-index -> target id; None = full target vocab
    extras: dict[str, Tensor] | None = None  # per-stream [B, ...] tensors recorded with the round (explorer)


class ProposalStep(Protocol):
    def __call__(self, draft: Any, sp: SamplingParams, generator: torch.Generator | None) -> Proposal: ...


class DrafterProposal:
    """Identity proposal step: the drafter's own choice at slots 1..n."""

    def __call__(self, draft, sp: SamplingParams, generator=None) -> Proposal:
        logits = draft.logits[:, 1:]  # [B, n, Vd]
        if sp.greedy:
            idx, q = logits.argmax(-1), None  # [B, n]
        else:
            q = process_logits(logits, sp)  # [B, n, Vd], same processing as the target's p
            idx = sample(q, generator)
        tokens = idx if draft.vocab is None else draft.vocab[idx]
        return Proposal(tokens, q, draft.vocab)


def draft_topk(draft, k: int) -> tuple[Tensor, Tensor]:
    """(target ids [B, S, K], logits [B, S, K]) of the drafter's top-K per slot."""
    if hasattr(draft, "topk"):
        return draft.topk(k)
    vals, idx = draft.logits.topk(min(k, draft.logits.shape[-1]), dim=-1)
    return (idx if draft.vocab is None else draft.vocab[idx]), vals


def tap_ids(drafter) -> list[int]:
    """The target layers whose outputs the drafter reads."""
    return list(drafter.target_layer_ids)


def valid_positions(valid: Tensor) -> Tensor:
    """Logical positions of slots valid [B, L] (count of valid slots before; holes get their neighbour's)."""
    return (valid.long().cumsum(-1) - 1).clamp(min=0)


class SpeculativeEngine:
    def __init__(self, target: TargetModel, drafter, proposer: ProposalStep | None = None,
                 record_topk: int = 0, pad_id: int = 0, compact_threshold: float = 0.25):
        self.target, self.drafter = target, drafter
        self.proposer = proposer or DrafterProposal()
        self.record_topk, self.pad_id, self.compact_threshold = record_topk, pad_id, compact_threshold

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], max_new_tokens: int, sp: SamplingParams = SamplingParams(),
                 eos_ids=None, generator: torch.Generator | None = None) -> GenerationResult:
        target, drafter = self.target, self.drafter
        dev, B, S = target.device, len(prompts), drafter.block_size
        n, taps = S - 1, tap_ids(drafter)
        eos_ids = target.eos_token_ids if eos_ids is None else eos_ids
        clock = Clock(dev)
        t_start = clock()
        sc = StreamCache(target, B)
        state = drafter.new_state(B)
        pre = sc.prefill(prompts, self.pad_id, taps=taps, last_logits_only=True)
        ctx = (pre.taps, sc.valid.clone(), valid_positions(sc.valid))  # pending context for the drafter
        last = sample_next(pre.logits[:, -1], sp, generator)  # [B] slot 0 of the first block
        outputs = Outputs(B, max_new_tokens, eos_ids, t_start)
        rows = list(range(B))  # original stream index of each active row
        done = outputs.emit(rows, last[:, None], torch.ones(B, dtype=torch.long), clock())
        rows, (last, *ctx) = drop_finished(done, rows, (last, *ctx), sc, state)
        t_prefill = clock()
        slots = torch.arange(S, device=dev)  # [S]
        masks = torch.full((1, n), drafter.mask_token_id, dtype=torch.long, device=dev)
        times, active, records = [], [], []
        accepted: list[list[int]] = [[] for _ in range(B)]
        while rows:
            b = len(rows)
            t0 = clock()
            drafter.extend_context(state, *ctx)
            pos = sc.next_pos[:, None] + slots  # [b, S] slot 0 sits at the next logical position
            block = torch.cat([last[:, None], masks.expand(b, n)], 1)  # [b, S]
            d = drafter.draft(state, block, pos)
            d.block_ids = block  # for proposal steps that condition on slot 0 (the sequential correctors)
            t1 = clock()
            prop = self.proposer(d, sp, generator)  # tokens [b, n]
            t2 = clock()
            v = sc.append(torch.cat([last[:, None], prop.tokens], 1), taps=taps)  # logits [b, S, V]
            res = verify_block(v.logits, prop.tokens, sp, prop.q, prop.q_vocab, generator)
            t3 = clock()
            acc = res.accepted  # [b]
            sc.commit(acc + 1, S)
            acc_l = acc.tolist()
            k = max(acc_l) + 1  # context grows by slot 0 + accepted proposals (acc + 1 positions)
            ctx = (v.taps[:, :k], slots[None, :k] < (acc + 1)[:, None], pos[:, :k])
            new = torch.cat([prop.tokens, prop.tokens[:, :1]], 1).scatter(1, acc[:, None], res.next_token[:, None])  # [b, S]
            offsets = [len(outputs.tokens[r]) - 1 for r in rows]
            done = outputs.emit(rows, new, acc + 1, clock())
            for r, a in zip(rows, acc_l):
                accepted[r].append(a)
            if self.record_topk:
                records.append(self._record(d, prop, res, rows, offsets, acc))
            active.append(b)
            last = res.next_token
            rows, (last, *ctx) = drop_finished(done, rows, (last, *ctx), sc, state)
            if rows:
                maybe_compact(sc.valid, self.compact_threshold, lambda: sc.compact(0.0))
                if hasattr(drafter, "compact") and hasattr(state, "valid"):
                    maybe_compact(state.valid, self.compact_threshold, lambda: drafter.compact(state, 0.0))
            t4 = clock()
            times.append((t1 - t0, t2 - t1, t3 - t2, t4 - t3))
        t_end = clock()
        return GenerationResult(
            tokens=outputs.tokens, finish_reason=outputs.finish, t_done=outputs.t_done,
            prefill_s=t_prefill - t_start, wall_s=t_end - t_start, phases=SPEC_PHASES,
            round_times=torch.tensor(times, dtype=torch.float64).reshape(-1, len(SPEC_PHASES)),
            round_streams=torch.tensor(active, dtype=torch.long), accepted=accepted, records=records, block_size=S,
        )

    def _record(self, d, prop: Proposal, res, rows, offsets, acc) -> RoundRecord:
        ids, logits = draft_topk(d, self.record_topk)  # [b, S, K]
        return RoundRecord(
            stream=torch.tensor(rows), offset=torch.tensor(offsets), accepted=acc.cpu(),
            proposals=prop.tokens.cpu(), topk_ids=ids[:, 1:].cpu(), topk_logits=logits[:, 1:].float().cpu(),
            target_tokens=None if res.target_tokens is None else res.target_tokens.cpu(),
            extras={k: v.float().cpu() if v.is_floating_point() else v.cpu() for k, v in (prop.extras or {}).items()},
        )
