"""The decoding contract: what a drafter, its state, its draft output and a proposal step must provide.

The speculative engine (`draftlab.decoding.speculative`) and the Draft-OPD rollout
(`draftlab.specopd.draft_opd`) only ever call what is declared here, through one function,
`draftlab.decoding.round.speculative_round`. Implement these Protocols to plug in a new method:

- a **drafter** (`Drafter`) turns context features into a block draft: the DFlash drafter
  (`draftlab.drafter.model.DFlashDrafter`), the test stubs (tests/stubs.py);
- a **proposal step** (`ProposalStep`) turns the draft into the n tokens the target verifies:
  the drafter's own choice (`DrafterProposal`), a corrector's path (`draftlab.corrector.proposal`).

An arm may have no drafter at all (drafter `None`, e.g. prompt-lookup decoding): the round then skips
the draft phase and hands the proposal step a `BlockInput` (the block's ids, no logits); such a step
declares `block_size`, and reads the committed tokens by also implementing `TracksStreams`. A proposal step
that `SkipsDrafts` may tell a round with a drafter that it needs no draft pass (a verify-width rule whose blocks
are all seeded to their end); it then gets a `BlockInput` too.

Shapes: B streams, S = block size (slot 0 = the last committed token, then n = S−1 proposals),
Vd = the drafter's vocabulary (a subset of the target's V when `vocab` maps it), H = hidden width.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch
from torch import Tensor

from draftlab.decoding.verify import SamplingParams, process_logits, sample


@runtime_checkable
class DraftOutput(Protocol):
    """One drafted block per stream."""

    logits: Tensor | None  # [B, S, Vd] fp32 (slot 0 included); None when the arm has no drafter
    hidden: Tensor | None  # [B, S, H] final hidden states (a corrector's input); None when not produced
    vocab: Tensor | None  # [Vd] long: draft index -> target id; None = the full target vocabulary
    # optional `extra_ids` [B, S] + `target_vocab_size`: a seed column (logits [B, S, Vd+1], the last column's
    # target id per slot, -1 = none); `DrafterProposal` then writes q over the target vocabulary; optional `anchor`
    # [B, n_taps*H]: the target's taps just before each block (for a corrector whose contract reads ANCHOR)
    block_ids: Tensor  # [B, S] the block's input ids: slot 0 = last committed token, then MASK (a seeded
    # drafter: its seeds, then MASK)

    def topk(self, k: int) -> tuple[Tensor, Tensor]:
        """(target ids [B, S, K], logits [B, S, K]) of the K best draft tokens per slot, best first."""
        ...


@runtime_checkable
class DrafterState(Protocol):
    """Per-stream drafter context (e.g. cached context K/V); rows follow the engine's active streams."""

    def drop_streams(self, keep: Tensor) -> None:
        """Keep only the streams where keep [B] bool is True."""
        ...


@runtime_checkable
class Drafter(Protocol):
    block_size: int  # S, slot 0 included
    mask_token_id: int  # the id of the n MASK slots of a block
    target_layer_ids: list[int]  # target layers whose outputs (taps) it reads as context; [] = none

    def new_state(self, batch_size: int, capacity: int = 0) -> DrafterState:
        """The state of `batch_size` streams; `capacity`: context positions per stream it must hold (0 = unknown:
        grow as needed)."""
        ...

    def extend_context(self, state: DrafterState, feats: Tensor, valid: Tensor, positions: Tensor) -> None:
        """Add T context positions: feats [B, T, n_taps·H] (the target's taps of committed tokens), valid
        [B, T] bool (False = padding or a rejected slot: not context), positions [B, T] logical."""
        ...

    def draft(self, state: DrafterState, block_ids: Tensor, positions: Tensor) -> DraftOutput:
        """One block per stream: block_ids [B, S] = [last committed token, MASK × n] at positions [B, S]."""
        ...


@runtime_checkable
class BuildsBlocks(Drafter, Protocol):
    """A drafter that builds its block's input ids itself (optional; default `[last, MASK × n]`): a seeded
    drafter (docs/algorithms.md "Seeded block drafting") puts the lookup continuation of each stream's committed text in
    slots 1..m. Its state then tracks the committed text: the state implements `TracksStreams`, and whoever drives the
    rounds calls start / extend / drop_streams on it, as on a proposal step that tracks streams. Optional
    `seeded: bool` (True: its blocks carry seeds): the engine then records per slot the seed and whether the
    drafter's top-1 kept it (`common.seed_marks`)."""

    def block_input(self, state: DrafterState, last: Tensor) -> Tensor:
        """last [B] committed tokens (slot 0) -> the block's input ids [B, S]."""
        ...


@dataclass
class Proposal:
    tokens: Tensor  # [B, n] proposed target ids (n may be < S−1: a shorter block is verified)
    q: Tensor | None = None  # [B, n, Vq] distribution they were sampled from; None = deterministic
    # (verified with the point-mass rule at T>0)
    q_vocab: Tensor | None = None  # [Vq] q-index -> target id, or [B, n, Vq] per slot (a sparse row: a corrector's
    # sampled walk); None = full target vocab
    extras: dict[str, Tensor] | None = None  # per-stream [B, ...] tensors recorded with the round (explorer)
    tree: object | None = None  # a `decoding.tree.Tree` of N nodes: the round verifies it instead of the chain
    # (tokens are then its nodes 1..N-1, for the record)


class ProposalStep(Protocol):
    def __call__(self, draft: DraftOutput, sp: SamplingParams, generator: torch.Generator | None) -> Proposal: ...


@runtime_checkable
class SkipsDrafts(Protocol):
    """Optional for a proposal step that can do without the drafter in some rounds (a verify-width rule whose
    every block is fully seeded: the seeds are the proposal). `needs_draft(block_ids)` False: the round runs no
    draft pass, hands the step a `BlockInput` (the block's ids, no logits), and the drafter's pending context
    waits for the next drafted round (`round.join_context`)."""

    def needs_draft(self, block_ids: Tensor, spans: list[int] | None = None) -> bool:
        """block_ids [B, S] (the round's block input; spans: each block's seeded span, known on the host for a
        seeded drafter, else None) -> whether the step needs the drafter's logits."""
        ...


@runtime_checkable
class TracksStreams(Protocol):
    """Optional for a proposal step that keeps its own per-stream state (e.g. the committed tokens for
    prompt lookup). The engine calls `start` after prefill, `extend` after every round, `drop_streams`
    when streams finish."""

    def start(self, prompts: list[list[int]], first: Tensor) -> None:
        """prompts: token ids per stream; first [B]: the first generated token (slot 0 of round 1)."""
        ...

    def extend(self, tokens: Tensor, counts: Tensor) -> None:
        """Each stream committed the first counts[b] of tokens [b, S] (accepted proposals + bonus token)."""
        ...

    def drop_streams(self, keep: Tensor) -> None: ...


@dataclass
class BlockInput:
    """The draft output of an arm without a drafter: the block's ids and nothing drafted."""

    block_ids: Tensor  # [B, S]
    logits: Tensor | None = None
    hidden: Tensor | None = None
    vocab: Tensor | None = None
    seed_spans: list[int] | None = None  # host: each block's seeded span (a seeded drafter's round; `round.py`)

    def topk(self, k: int) -> tuple[Tensor, Tensor]:
        raise NotImplementedError("an arm without a drafter has no draft distribution to rank")


class DrafterProposal:
    """Identity proposal step: the drafter's own choice at slots 1..n (argmax at T=0, a sample of q at T>0)."""

    def __call__(self, draft: DraftOutput, sp: SamplingParams, generator: torch.Generator | None = None) -> Proposal:
        logits = draft.logits[:, 1:]  # [B, n, Vd]
        if sp.greedy:
            idx, q = logits.argmax(-1), None  # [B, n]
        else:
            q = process_logits(logits, sp)  # [B, n, Vd], same processing as the target's p
            idx = sample(q, generator)
        extra = getattr(draft, "extra_ids", None)  # [B, S] a seed column's ids (the last logit column) | None
        if extra is None:
            tokens = idx if draft.vocab is None else draft.vocab[idx]
            return Proposal(tokens, q, draft.vocab)
        return Proposal(*seed_column_proposal(idx, q, draft.vocab, extra[:, 1:], draft.target_vocab_size))


def seed_column_proposal(idx: Tensor, q: Tensor | None, vocab: Tensor, extra: Tensor, V: int) -> tuple:
    """A draft over [draft vocabulary (Vd); one seed column per slot] -> (tokens [B, n], q [B, n, V] | None):
    idx [B, n] in 0..Vd (Vd = the seed column), q [B, n, Vd+1], extra [B, n] the column's target id (-1: none,
    its probability is 0). The column's id differs per row, so q is written over the target vocabulary."""
    Vd = vocab.numel()
    tokens = torch.where(idx == Vd, extra, vocab[idx.clamp(max=Vd - 1)])
    if q is None:
        return tokens, None
    full = q.new_zeros(*q.shape[:-1], V).index_copy_(-1, vocab, q[..., :Vd])  # [B, n, V]
    col = torch.where(extra >= 0, q[..., Vd], torch.zeros_like(q[..., Vd]))
    return tokens, full.scatter_add_(-1, extra.clamp(min=0)[..., None], col[..., None])

