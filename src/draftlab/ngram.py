"""The n-gram index and the one seeding routine of seeded block drafting (docs/algorithms.md "Seeded block drafting"),
below both the drafter and the decoding loop (layer 1: plain Python + torch, imports nothing of draftlab but errors).

- `NgramIndex`: one stream's committed text and, per n-gram length m = 1..max_ngram, the last start of
  each n-gram that has a following token. `continuation(min_m)` finds the most recent earlier
  occurrence of the longest suffix (m = max_ngram down to min_m) and returns where the tokens that
  followed it start; `lookup` cuts them. O(max_ngram) per committed token. Prompt lookup
  (`draftlab.decoding.lookup`) proposes `lookup`'s tokens.
- The seed of a block anchored at a (slot 0 = x_a) is `lookup(n, min_match)` on the text x_{<=a}, cut
  to n = S-1 tokens and to the text that exists, then MASK to n slots (all MASK without a match).
  Two entry points, both through `NgramIndex.extend` + `continuation`:
  * teacher-forced, every position of a sequence at once: `seed_starts` walks the sequence once and
    records, at each position p, where the seed of an anchor at p starts (causal: only x_{<=p} is in
    the index when p is recorded); `gather_seeds` turns starts + anchors into seed ids [B, A, n];
  * incremental, per stream: `StreamSeeds` (the engine's `TracksStreams` calls: start / extend /
    drop_streams) keeps an index per stream; `seeds(n, mask_id)` is the current block's seed.
"""
from __future__ import annotations

import torch
from torch import Tensor

from draftlab.errors import DraftlabError

SEED_MODES = ("none", "lookup")  # drafter.seed: none = the paper's [x_a, MASK, ...]; lookup = a seeded block


def check_seed(seed: str, max_ngram: int, min_match: int, where: str = "drafter", seed_logit: bool = False,
               seed_bias: float = 0.0) -> None:
    """One-line errors naming the `drafter.seed*` key (the library's check; the config checks the same)."""
    if seed not in SEED_MODES:
        raise DraftlabError(f"{where}.seed={seed!r} is not valid; choose one of: {', '.join(SEED_MODES)}")
    if seed_logit and seed == "none":
        raise DraftlabError(f"{where}.seed_logit=true needs seeds: set {where}.seed=lookup (or seed_logit=false)")
    if not seed_bias >= 0 or seed_bias == float("inf"):
        raise DraftlabError(f"{where}.seed_bias={seed_bias} must be a finite number >= 0 (0 = off; else the bias's "
                            f"initial value in logits)")
    if seed_bias and seed == "none":
        raise DraftlabError(f"{where}.seed_bias={seed_bias} needs seeds: set {where}.seed=lookup (or seed_bias=0)")
    if max_ngram < 1:
        raise DraftlabError(f"{where}.seed_max_ngram={max_ngram} must be >= 1 (the longest suffix n-gram looked up)")
    if not 1 <= min_match <= max_ngram:
        raise DraftlabError(f"{where}.seed_min_match={min_match} must lie in 1..{where}.seed_max_ngram={max_ngram}")


class NgramIndex:
    """One stream's committed text and, per n-gram length m = 1..max_ngram, the last start of each
    n-gram that has a following token."""

    def __init__(self, tokens: list[int], max_ngram: int):
        self.max_ngram = max_ngram
        self.text: list[int] = []
        self.last: list[dict[tuple, int]] = [dict() for _ in range(max_ngram + 1)]  # [m] n-gram -> start
        self.extend(tokens)

    def extend(self, tokens: list[int]) -> None:
        for t in tokens:
            j = len(self.text)  # t lands at index j: the n-grams ending at j−1 now have a follower
            self.text.append(t)
            for m in range(1, min(self.max_ngram, j) + 1):
                self.last[m][tuple(self.text[j - m:j])] = j - m

    def continuation(self, min_m: int = 1) -> tuple[int, int]:
        """(index of the first token that followed the most recent earlier occurrence of the longest
        matching suffix, m) for m = max_ngram down to min_m; (-1, 0) without a match."""
        L = len(self.text)
        for m in range(min(self.max_ngram, L), min_m - 1, -1):
            i = self.last[m].get(tuple(self.text[L - m:]))
            if i is not None:
                return i + m, m
        return -1, 0

    def lookup(self, num_tokens: int, min_m: int = 1) -> tuple[list[int], int]:
        """(the tokens that followed the most recent earlier occurrence of the longest matching suffix,
        at most num_tokens of them, m); ([], 0) without a match."""
        c, m = self.continuation(min_m)
        return (self.text[c:c + num_tokens], m) if m else ([], 0)


# ---- teacher-forced: every anchor of a sequence at once ----------------------------------------------


def seed_starts(tokens: list[int], max_ngram: int, min_match: int) -> list[int]:
    """One pass over a sequence: starts[p] = where the seed of an anchor at p starts (index into
    `tokens`, <= p), -1 without a match. Only tokens[:p+1] are in the index when starts[p] is taken."""
    idx, out = NgramIndex([], max_ngram), []
    for t in tokens:
        idx.extend([t])
        out.append(idx.continuation(min_match)[0])
    return out


def gather_seeds(ids: Tensor, starts: Tensor, anchors: Tensor, n: int, mask_id: int) -> Tensor:
    """ids [B, T] tokens, starts [B, T] long (`seed_starts` per row), anchors [B, A] -> seeds [B, A, n]:
    ids[c + k] for k < n while c + k <= a (the text that exists at the anchor), MASK elsewhere."""
    c = starts.gather(1, anchors)  # [B, A]
    pos = c[..., None] + torch.arange(n, device=ids.device)  # [B, A, n]
    ok = (c[..., None] >= 0) & (pos <= anchors[..., None])
    B, A = anchors.shape
    tok = ids.gather(1, pos.clamp(0, ids.shape[1] - 1).reshape(B, -1)).view(B, A, n)
    return torch.where(ok, tok, torch.full_like(tok, mask_id))


def sequence_seeds(ids: Tensor, anchors: Tensor, n: int, mask_id: int, max_ngram: int, min_match: int,
                   lengths: Tensor | None = None) -> Tensor:
    """Seeds [B, A, n] of every anchor of a (padded) batch ids [B, T], anchors [B, A], computed from the
    ids themselves (one `seed_starts` pass per row over its first lengths[b] tokens)."""
    B, T = ids.shape
    rows = ids.tolist()
    lens = [T] * B if lengths is None else lengths.tolist()
    starts = torch.full((B, T), -1, dtype=torch.long)
    for b in range(B):
        s = seed_starts(rows[b][:lens[b]], max_ngram, min_match)
        starts[b, :len(s)] = torch.tensor(s, dtype=torch.long)
    return gather_seeds(ids, starts.to(ids.device), anchors, n, mask_id)


# ---- incremental: one index per stream (the engine) ---------------------------------------------------


class StreamTexts:
    """Per-stream committed text (one `NgramIndex` each), driven as the engine drives a `TracksStreams`
    step: `start` after prefill, `extend` after every round, `drop_streams` when streams finish. Prompt
    lookup (`decoding.lookup.PromptLookup`) and a seeded drafter's seeds (`StreamSeeds`) both keep it."""

    def __init__(self, max_ngram: int):
        self.max_ngram = max_ngram
        self.streams: list[NgramIndex] = []

    def start(self, prompts: list[list[int]], first: Tensor) -> None:
        self.streams = [NgramIndex(list(p) + [int(f)], self.max_ngram) for p, f in zip(prompts, first.tolist())]

    def extend(self, tokens: Tensor, counts: Tensor) -> None:
        for s, row, c in zip(self.streams, tokens.tolist(), counts.tolist()):
            s.extend(row[:c])

    def drop_streams(self, keep: Tensor) -> None:
        self.streams = [s for s, k in zip(self.streams, keep.tolist()) if k]

    def last_tokens(self) -> list[int]:
        """Each stream's last committed token (a round's slot 0), from the host-side text: no device read."""
        return [s.text[-1] for s in self.streams]


class StreamSeeds(StreamTexts):
    """Per-stream committed text for a seeded drafter, and the current block's seeds."""

    def __init__(self, max_ngram: int, min_match: int):
        super().__init__(max_ngram)
        self.min_match = min_match

    def seeds(self, batch: int, n: int, mask_id: int, device=None) -> Tensor:
        """[batch, n] the current block's seed per stream (MASK-filled); the text ends with slot 0."""
        if len(self.streams) != batch:
            raise DraftlabError(f"a seeded drafter's state tracks the text of {len(self.streams)} streams, the round has "
                                f"{batch}; its caller must drive it (state.start / extend, the TracksStreams calls)")
        found = [s.lookup(n, self.min_match)[0][:n] for s in self.streams]
        self.spans = [len(f) for f in found]  # host: each block's seeded span (the verify-width rule reads it)
        rows = [f + [mask_id] * (n - len(f)) for f in found]
        return torch.tensor(rows, dtype=torch.long, device=device).reshape(batch, n)
