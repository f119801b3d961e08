"""Speculative decoding with a parallel (DFlash-style) drafter, N ragged streams at once (docs/algorithms.md
"Rounds, τ and verification", "DFlash").

Prefill the target on the prompts (with the drafter's taps) -> the first token -> rounds of
`draftlab.decoding.round.speculative_round` (draft -> propose -> verify -> commit) until every stream
stops. Around each round the engine does the per-stream bookkeeping: emit tokens, stop streams on
EOS / max_new_tokens, drop finished streams (target cache, drafter state, a proposal step that
tracks streams), feed the committed tokens to whatever tracks them (`TracksStreams`: prompt lookup,
a seeded drafter's state), compact the caches, record the round (top-K, proposals, the proposal
step's extras; for a drafter that says it is `seeded`, per slot its seed and whether its top-1 kept it; a
round the proposal step ran without a draft pass records its seeds as the only candidates, kept).
The drafter and the proposal step are anything that implements `draftlab.decoding.api`; the drafter
may be None (the proposal step then declares `block_size`).
"""
from __future__ import annotations

import torch

from draftlab.decoding.api import Drafter, DrafterProposal, ProposalStep, TracksStreams
from draftlab.decoding.common import (GenerationResult, Outputs, PhaseTimer, RoundLog, RoundRecord, live_rows,
                                     partial_on_interrupt, retire, seed_marks, seed_topk, to_host)
from draftlab.decoding.round import PHASES, RoundResult, speculative_round, tap_ids, valid_positions
from draftlab.decoding.shapes import Part, pad_batch, run_shapes
from draftlab.decoding.tree import tree_nodes
from draftlab.decoding.verify import SamplingParams, sample_next
from draftlab.verifier.model import TargetModel
from draftlab.verifier.streams import StreamCache, capacity_for


class SpeculativeEngine:
    def __init__(self, target: TargetModel, drafter: Drafter | None, proposer: ProposalStep | None = None,
                 record_topk: int = 0, pad_id: int = 0, kv_capacity: int = 0):
        if drafter is None and not getattr(proposer, "block_size", 0):
            raise ValueError("without a drafter the proposal step must declare block_size (slot 0 + proposals)")
        self.target, self.drafter = target, drafter
        self.proposer = proposer or DrafterProposal()
        self.block_size = drafter.block_size if drafter is not None else proposer.block_size
        self.record_topk = record_topk  # without a drafter: records without top-K (nothing to rank)
        self.pad_id, self.kv_capacity = pad_id, kv_capacity  # slots per stream (0 = sized from the request)

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], max_new_tokens: int, sp: SamplingParams = SamplingParams(),
                 eos_ids=None, generator: torch.Generator | None = None) -> GenerationResult:
        target, drafter = self.target, self.drafter
        dev, n, S = target.device, len(prompts), self.block_size
        eos_ids = target.eos_token_ids if eos_ids is None else eos_ids
        timer = PhaseTimer(dev)
        t_start = timer.now()
        span = max((S, *tree_nodes(self.proposer)))  # slots one round appends: a block, or a tree's nodes
        # compiled steps: the run's shapes, the request's graphs planned before its first compiled call
        shapes = run_shapes(target, prompts, max_new_tokens, span, Part(drafter, self.proposer), sp)
        if shapes is None:
            rows = list(range(n))  # original stream index of each active row
            cap = self.kv_capacity or capacity_for([len(p) for p in prompts], max_new_tokens, span)
        else:  # a declared batch size (padding rows retired from the start) and the run's capacity
            prompts, rows = pad_batch(prompts, shapes.batch(n))
            cap = shapes.capacity
        B = len(prompts)
        sc = StreamCache(target, B, cap, shapes=shapes)
        state = drafter.new_state(B, cap) if drafter is not None else None
        # what tracks the committed text: a proposal step (prompt lookup) and a drafter state (a seeded drafter)
        trackers = [x for x in (self.proposer, state) if x is not None and isinstance(x, TracksStreams)]
        pre = sc.prefill(prompts, self.pad_id, taps=tap_ids(drafter), last_logits_only=True)
        ctx = (pre.taps, sc.prompt_valid, valid_positions(sc.prompt_valid))  # pending context for the drafter
        last = sample_next(pre.logits[:, -1], sp, generator)  # [B] slot 0 of the first block
        outputs = Outputs(n, max_new_tokens, eos_ids, t_start)
        first = to_host(last)  # the prefill's copy: the first token
        done = outputs.emit(rows, first[:, None], torch.ones(B, dtype=torch.long), timer.host_time)
        for t in trackers:
            t.start(prompts, first)
        caches = [c for c in (sc, state, *(t for t in trackers if t is not state)) if c is not None]
        rows, (last, *ctx) = retire(done, rows, (last, *ctx), *caches, shapes=shapes)  # compiled: declared sizes
        t_prefill = timer.now()
        log, records = RoundLog(timer, PHASES), []
        accepted: list[list[int]] = [[] for _ in range(n)]
        with partial_on_interrupt(outputs):  # Ctrl-C: the exception carries the tokens so far
            while any(i >= 0 for i in rows):
                live = live_rows(rows, dev) if shapes is not None else None
                r = speculative_round(sc, drafter, state, self.proposer, last, ctx, sp, generator, timer, S, live)
                res, ctx = r.result, r.context
                acc_h, new_h = r.host[:, 0], r.host[:, 1:]  # CPU: the round's one copy (accepted, committed tokens)
                kept_h = (acc_h + 1) * torch.tensor([int(i >= 0) for i in rows])  # a retired row keeps nothing
                offsets = [len(outputs.tokens[i]) - 1 if i >= 0 else -1 for i in rows]
                done = outputs.emit(rows, new_h, kept_h, timer.host_time)
                for t in trackers:
                    t.extend(new_h, kept_h)
                for i, a in zip(rows, r.accepted):
                    if i >= 0:
                        accepted[i].append(a)
                if self.record_topk:
                    records.append(self._record(r, rows, offsets))
                live_n = sum(i >= 0 for i in rows)
                last = res.next_token
                rows, (last, *ctx) = retire(done, rows, (last, *ctx), *caches, shapes=shapes)
                log.close(live_n)  # the round's phases: draft, propose, verify, commit
        return log.result(outputs, t_start, t_prefill, accepted=accepted, records=records, block_size=S)

    def _record(self, r: RoundResult, rows: list[int], offsets: list[int]) -> RoundRecord:
        if self.drafter is None:
            ids, logits = None, None
        elif r.draft.logits is None:  # a seeds-only round (no draft pass): the seeds are its only candidates
            ids, logits = seed_topk(r.draft.block_ids, self.record_topk)
        else:
            ids, logits = r.draft.topk(self.record_topk)  # [b, S, K]
        res, prop = r.result, r.proposal
        extras = {k: v.float().cpu() if v.is_floating_point() else v.cpu() for k, v in (prop.extras or {}).items()}
        if ids is not None and getattr(self.drafter, "seeded", False):  # seeds in slots 1..m: what became of them
            extras.update(seed_marks(r.draft.block_ids.cpu(), self.drafter.mask_token_id, ids[:, 1:, 0].cpu()))
        rec = RoundRecord(
            stream=torch.tensor(rows), offset=torch.tensor(offsets), accepted=res.accepted.cpu(),
            proposals=prop.tokens.cpu(), topk_ids=None if ids is None else ids[:, 1:].cpu(),
            topk_logits=None if logits is None else logits[:, 1:].float().cpu(),
            target_tokens=None if res.target_tokens is None else res.target_tokens.cpu(),
            extras=extras,
        )
        if all(i >= 0 for i in rows):
            return rec
        idx = torch.tensor([j for j, i in enumerate(rows) if i >= 0])  # the live rows only: retired ones record nothing
        pick = lambda t: None if t is None else t.index_select(0, idx)  # noqa: E731
        return RoundRecord(stream=pick(rec.stream), offset=pick(rec.offset), accepted=pick(rec.accepted),
                           proposals=pick(rec.proposals), topk_ids=pick(rec.topk_ids), topk_logits=pick(rec.topk_logits),
                           target_tokens=pick(rec.target_tokens),
                           extras={k: pick(v) if torch.is_tensor(v) and v.dim() and v.shape[0] == len(rows) else v
                                   for k, v in rec.extras.items()})
