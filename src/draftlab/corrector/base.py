"""The one corrector interface, shared by DCOCO and the sequential correctors (DSpark, Domino).

Every consumer — co-training (`draftlab.recipes.corrector.cotrain`), validation (`draftlab.recipes.corrector.evaluate`),
the engine's proposal step (`draftlab.corrector.proposal`), the stage's checkpoints and the benchmark
arms — talks to a `Corrector` through these methods only, never by type:

- `propose(block, rule, lam, backend) -> Correction`: the corrected tokens of drafted blocks (+ what
  the round records for the explorer); `propose_rules` does it for several path rules at once; `sample(block, sp, u)`
  the sampled walk at T > 0 with the rows it drew from (`draftlab.corrector.walks`; the families that walk);
- `loss(block, labels, valid, ...) -> CorrectionLoss`: the corrector's training loss, as a numerator and
  a denominator so data-parallel training can sum both over ranks before dividing;
- `save(folder, info)`: config.json (the architecture + `format`) and model.safetensors via
  `draftlab.io`; `draftlab.corrector.families.load_corrector(folder, drafter)` reads any family back.

`DraftBlock` is what a corrector reads of a drafter pass: the proposed slots' hidden states, the
block's slot-0 token, the draft vocabulary, and either the full draft logits or the top-K candidates
(or a head to compute the logits from). Shapes: N blocks (any leading dims), n proposed slots,
K candidates, Vd draft vocabulary, H hidden width.

A seeded drafter (docs/algorithms.md "Seeded block drafting", `arch.seed = "lookup"`) reads its slots' seeds in its head
as well as in its block input: the seed bias adds a learned per-slot logit to each slot's seed, and the seed column
(`arch.seed_logit` with a draft vocabulary) gives a seed outside the draft vocabulary its own logit as
column Vd. `drafter_block` is the one place a training-side block gets them: its head is the drafter's
head on the slots' seeds (`slot_logits`, what the engine's `draft` computes), and `extra` maps column Vd to
each slot's seed, so the top-K candidates (`draft_candidates`), a walk's chosen ids (`target_ids`) and the
labels' columns (`DraftBlock.label_index`) are the engine's. At run time the engine's draft output already
carries both (its logits and `extra_ids`). A plain drafter's block has `seeds = extra = None` and every
path is what it was.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
from torch import Tensor, nn

from draftlab.drafter.state import seed_column_ids
from draftlab.io import save_weights_folder


# A family's contract: what its proposal and its training read beyond the block's candidates, and what it offers the
# engine. Co-training, evaluation, the proposal step and the tree ranking read `Corrector.contract`, never an
# attribute they probe for; `draftlab.corrector.family.Family.check` holds a record's declaration to its class.
HIDDEN, LOGITS, ANCHOR, TEACHER = "hidden", "logits", "anchor", "teacher"  # the slots of a block it may read
READS = (HIDDEN, LOGITS, ANCHOR, TEACHER)  # ANCHOR: `DraftBlock.anchor`; TEACHER: `DraftBlock.teacher` (training)
PAIR_ROWS, SAMPLED_WALK = "pair_rows", "sampled_walk"  # `transition_rows` (pair-ranked trees); `sample` (T > 0)
OFFERS = {PAIR_ROWS: "transition_rows", SAMPLED_WALK: "sample"}  # what it offers -> the method that does it


@dataclass(frozen=True)
class Contract:
    """What a family's correctors read (`reads`, of `READS`) and offer (`offers`, of `OFFERS`)."""

    reads: frozenset = frozenset({HIDDEN, LOGITS})
    offers: frozenset = frozenset()

    def __post_init__(self) -> None:
        unknown = sorted(set(self.reads) - set(READS)) + sorted(set(self.offers) - set(OFFERS))
        if unknown:
            raise ValueError(f"a contract names {unknown}, which draftlab does not know (reads: {', '.join(READS)}; "
                             f"offers: {', '.join(OFFERS)})")

    def without(self, *reads: str) -> "Contract":
        return Contract(self.reads - set(reads), self.offers)


@dataclass
class DraftBlock:
    hidden: Tensor  # [*, n, H] the proposed slots' hidden states (slot 0 excluded)
    slot0: Tensor | None = None  # [*] the block's slot-0 token (the last committed one), target id
    vocab: Tensor | None = None  # [Vd] draft index -> target id; None = the full target vocabulary
    logits: Tensor | None = None  # [*, n, Vd] draft logits of the proposed slots
    head: Callable[[Tensor], Tensor] | None = None  # hidden [..., H] -> logits [..., Vd] when logits is None
    cand: tuple[Tensor, Tensor] | None = None  # precomputed top-K: ids [*, n, K] (target ids), logits [*, n, K]
    # a seeded drafter whose head reads its seeds (seed bias / seed column; see `drafter_block`):
    seeds: Tensor | None = None  # [*, n] the proposed slots' seeds (target ids, MASK where none): `head` reads them
    extra: Tensor | None = None  # [*, n] the seed column's target id per slot (-1: none); logits then have Vd+1 columns
    # the slots a family's contract may name beyond the drafter's block (`ANCHOR`, `TEACHER`):
    anchor: Tensor | None = None  # [*, H] the drafter's projected context row just before the block (None: unknown)
    teacher: Tensor | None = None  # [*, n, K] training only: relu(z(label) - z(candidate)), z the target's logits

    def full_logits(self) -> Tensor:
        """[*, n, Vd] draft logits, [*, n, Vd+1] with the seed column (computed from `head` when not given)."""
        if self.logits is None:
            if self.head is None:
                raise ValueError("this corrector needs the draft logits: give DraftBlock.logits or .head")
            self.logits = self.head(self.hidden) if self.seeds is None else self.head(self.hidden, self.seeds)
        return self.logits

    def rows(self, sl: slice) -> "DraftBlock":
        """The blocks sl of a flat [N, ...] DraftBlock (every per-block tensor sliced alike)."""
        cut = lambda t: None if t is None else t[sl]  # noqa: E731
        return DraftBlock(self.hidden[sl], cut(self.slot0), self.vocab, cut(self.logits), self.head,
                          None if self.cand is None else (self.cand[0][sl], self.cand[1][sl]), cut(self.seeds),
                          cut(self.extra), cut(self.anchor), cut(self.teacher))

    def candidates(self, k: int) -> tuple[Tensor, Tensor]:
        """Top-K of every proposed slot: (target ids [*, n, K], logits [*, n, K]), best first."""
        if self.cand is None:
            self.cand = draft_candidates(self.full_logits(), k, self.vocab, self.extra)
        return self.cand

    def label_index(self, labels: Tensor, draft_index: Tensor) -> Tensor:
        """Target ids labels [*, n] -> their column in the draft logits [*, n]: the draft index
        (draft_index [V]: target id -> draft index, -1 outside), Vd (the seed column) for a label outside the
        draft vocabulary that is its slot's seed, -1 where the head cannot express it."""
        didx = draft_index[labels]  # [*, n]
        if self.extra is None:
            return didx
        col = torch.full_like(didx, self.vocab.numel())  # [*, n] the seed column's index
        return torch.where((didx < 0) & (self.extra == labels), col, didx)


@dataclass
class Correction:
    tokens: Tensor  # [*, n] corrected proposals (target ids)
    extras: dict[str, Tensor] = field(default_factory=dict)  # recorded with the round (DCOCO: its K×K grid)


@dataclass
class CorrectionLoss:
    num: Tensor  # [] Σ weight · loss over supervised transitions / slots (carries the gradient)
    den: Tensor  # [] Σ weight (summed over ranks before dividing)
    mask: Tensor  # [B, A, ·] bool: what was supervised
    valid: Tensor  # [B, A, ·] bool: what could have been (the supervised fraction's denominator)


def scale_grad(x: Tensor, weight: float) -> Tensor:
    """x unchanged in the forward pass; its gradient multiplied by `weight` in the backward pass
    (1: untouched, 0: a stop-gradient). How co-training weights the corrector loss's gradient into the
    drafter, per path (hidden states, draft logits)."""
    if weight == 1.0:
        return x
    if weight == 0.0:
        return x.detach()
    return _ScaleGrad.apply(x, weight)  # value: exactly x, -inf entries included (a seed column); gradient: weight


class _ScaleGrad(torch.autograd.Function):
    """Identity forward, gradient × weight backward. (`d + w·(x − d)` with d = x.detach() would turn the seed
    column's -inf logits into NaN: -inf − -inf.)"""

    @staticmethod
    def forward(ctx, x: Tensor, weight: float) -> Tensor:
        ctx.weight = weight
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:
        return grad * ctx.weight, None


def target_ids(idx: Tensor, vocab: Tensor | None = None, extra: Tensor | None = None) -> Tensor:
    """Draft indices idx [...] -> target ids: vocab[idx] (None: identity); with the seed column, index Vd ->
    the slot's seed (extra [...], broadcastable to idx)."""
    if vocab is None:
        return idx
    return vocab[idx] if extra is None else seed_column_ids(idx, vocab, extra)


def draft_candidates(logits: Tensor, k: int, vocab: Tensor | None = None,
                     extra: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Top-K of draft logits [..., Vd] ([..., Vd+1] with the seed column, extra [...] its target id per slot)
    -> (target ids [..., K], logits [..., K]), best first. The logits are gathered, so gradients flow into
    `logits` (co-training)."""
    vals, idx = logits.topk(min(k, logits.shape[-1]), dim=-1)
    return target_ids(idx, vocab, None if extra is None else extra[..., None]), vals


# ---- a seeded drafter's head, the one place the corrector side reads its seeds ----------------------------


def seed_columns(drafter, seeds: Tensor | None) -> Tensor | None:
    """The seed column's target id per slot [...] (-1 where the seed is MASK or inside the draft vocabulary)
    when the drafter's logits have the column (a seeded drafter with `arch.seed_logit` and a draft vocabulary)
    and the slots' seeds [...] are given; None otherwise (the logits then have Vd columns)."""
    if seeds is None or not drafter.arch.seeded or not drafter.seed_column:
        return None
    return drafter.seed_ids(seeds)


def slot_logits(drafter, hidden: Tensor, seeds: Tensor | None = None,
                slots: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
    """The drafter's head on proposed slots as the engine's `draft` applies it: hidden [..., H], seeds [...]
    (the rows' seeds; None: a plain block), slots [...] (the rows' slot indices 1..n; None: the last dim of
    seeds is slots 1..n) -> (logits [..., Vd] or [..., Vd+1] with the seed bias and seed column, extra [...]
    the seed column's target ids or None)."""
    if seeds is None or not drafter.arch.seeded:
        return drafter.logits(hidden), None
    return drafter.logits(hidden, seeds, slots), seed_columns(drafter, seeds)


def drafter_block(drafter, hidden: Tensor, slot0: Tensor | None = None, seeds: Tensor | None = None,
                  logits: Tensor | None = None, cand: tuple[Tensor, Tensor] | None = None,
                  anchor: Tensor | None = None) -> DraftBlock:
    """The DraftBlock of a (training-side) drafter pass: hidden [*, n, H] of the proposed slots 1..n, slot0 [*],
    seeds [*, n] (a seeded drafter's seeds of slots 1..n, the block input's; ignored for a plain drafter),
    logits [*, n, Vd(+1)] when already computed on the same seeds (else the head computes them on demand),
    cand: precomputed top-K, anchor [*, H]: the projected context row before each block. The head and the candidates
    read the seeds as the engine's draft does."""
    seeds = seeds if seeds is not None and drafter.arch.seeded and drafter.reads_seeds else None
    return DraftBlock(hidden, slot0, drafter.draft_vocab, logits, drafter.logits, cand, seeds,
                      seed_columns(drafter, seeds), anchor)


def anchor_taps(feats: Tensor, anchors: Tensor, ctx_valid: Tensor) -> Tensor:
    """The target's taps just before each training block (LiLiCorr's anchor, as the engine's `DrafterState.anchor`
    gives it): feats [B, L, n_taps*H], anchors [B, A] (slot 0's position), ctx_valid [B, L] -> [B, A, n_taps*H], the
    row at anchor − 1; all zero (unknown) where that row does not exist."""
    pos = anchors - 1  # [B, A]
    ok = (pos >= 0) & (pos < feats.shape[1])
    pos = pos.clamp(0, feats.shape[1] - 1)
    ok = ok & ctx_valid.gather(1, pos)
    rows = feats.gather(1, pos[..., None].expand(-1, -1, feats.shape[-1]))  # [B, A, n_taps*H]
    return rows * ok[..., None].to(rows.dtype)


class Corrector(nn.Module):
    """Base class of every corrector family; `arch` is its architecture dataclass (saved as config.json)."""

    FORMAT = ""  # config.json `format` of this family's checkpoints
    CONTRACT = Contract()  # what the family's correctors may read and what they offer (its record's declaration)
    arch: object

    @property
    def contract(self) -> Contract:
        """What this corrector reads and offers: its class's `CONTRACT` (a family may read less per instance, e.g.
        the target's logits only when its loss weighs them)."""
        return self.CONTRACT

    def share_embedding(self, embed_tokens: nn.Embedding, vocab_size: int, embed_dim: int) -> None:
        """Hold the target's frozen token embedding (shared with the drafter: not registered, so neither trained,
        saved nor moved), after checking its shape against the corrector's architecture."""
        if tuple(embed_tokens.weight.shape) != (vocab_size, embed_dim):
            raise ValueError(f"embedding is {tuple(embed_tokens.weight.shape)}, the corrector expects "
                             f"({vocab_size}, {embed_dim})")
        self.__dict__["_embed"] = embed_tokens

    @property
    def embed_tokens(self) -> nn.Embedding:
        """The target's frozen token embedding (`share_embedding`)."""
        return self._embed

    @property
    def dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def parameter_breakdown(self) -> dict[str, int]:
        """Trainable parameters per block (analytic; equals num_parameters())."""
        raise NotImplementedError

    def propose(self, block: DraftBlock, rule: str = "greedy", lam: float = 0.75,
                backend: str | None = None) -> Correction:
        raise NotImplementedError

    def sample(self, block: DraftBlock, sp, u: Tensor):
        """The sampled walk at T > 0 (`draftlab.corrector.walks`): sp a `SamplingParams`, u [*, n] uniforms drawn
        outside -> a `SampledWalk` (tokens [*, n], the rows q [*, n, M] they were drawn from, their ids [*, n, M]).
        A family without one has no `sampled` arm option (its record's `arms`)."""
        raise NotImplementedError(f"{type(self).__name__} has no sampled walk")

    def propose_rules(self, block: DraftBlock, rules: tuple[str, ...], lam: float = 0.75,
                      backend: str | None = None) -> dict[str, Tensor]:
        """{rule: tokens [*, n]} for several path rules (a family with one walk returns it for each)."""
        return {r: self.propose(block, r, lam, backend).tokens for r in rules}

    def loss(self, block: DraftBlock, labels: Tensor, valid: Tensor, draft_index: Tensor, rho: float,
             cumulative_mask: bool = False, kind: str = "joint") -> CorrectionLoss:
        """Training loss on teacher-forced blocks: block.hidden [B, A, n, H], block.logits [B, A, n, Vd],
        block.slot0 [B, A]; labels / valid [B, A, n] (the target's greedy tokens); draft_index [V]:
        target id -> draft index (-1 outside the draft vocabulary); slot weights exp(−(p−1)/ρ); kind: the
        loss kind (`draftlab.corrector.variants.LOSSES`; a family with one loss accepts only `joint`)."""
        raise NotImplementedError

    def save(self, folder: str | Path, info: dict | None = None) -> Path:
        """Write config.json (architecture, parameter count, `info`) + model.safetensors atomically."""
        cfg = {**self.arch.to_dict(), "num_parameters": self.num_parameters(), "info": info or {}}
        return save_weights_folder(folder, cfg, self.state_dict(), self.FORMAT)
