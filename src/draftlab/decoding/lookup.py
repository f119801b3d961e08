"""Prompt-lookup (n-gram) proposals: the `pld` arm's proposal step and the `dflash-pld` hybrid.

`PromptLookup` is a `ProposalStep` that needs no drafter (it declares `block_size` and implements
`TracksStreams`): per stream it keeps the committed text (prompt + generated tokens, ending with the
block's slot 0) and, for m = max_ngram down to 1, finds the most recent earlier occurrence of the last
m tokens; the tokens that followed it (up to `num_tokens` ≤ n = S−1) are the proposal. No match: no
proposal for that stream (the round still verifies slot 0 and emits the target's token).

- A batch verifies W = the longest proposal of its streams this round (0 when no stream matched: the
  round is one AR step). Shorter proposals are padded by repeating their last token (slot 0 when
  empty); padding is still a proposal, judged by the same rule, so it can only help.
- The proposal is deterministic: at T>0 the verifier applies the point-mass rule (docs/algorithms.md
  "Rounds, τ and verification"), which keeps decoding lossless; at T=0 the output is AR's, token for token.
- The lookup is O(max_ngram) per committed token: `draftlab.ngram.NgramIndex` (below the drafter, which
  seeds its blocks with the same index) keeps a dict per n-gram length from each n-gram to the last
  start that has a following token.

`LookupHybrid` (the `dflash-pld` arm) wraps another proposal step (the drafter's own choice) and, per
stream and round, uses the lookup where an n-gram of at least `min_match` tokens matched:
- `switch`: the whole proposal is the lookup's (padded as above) — else the drafter's block;
- `splice`: the lookup's tokens at slots 1..L, the drafter's at slots L+1..n.
At T>0 a slot taken from the lookup is a point mass and a drafter slot keeps its q: the round's q is
written over the full target vocabulary with one-hot rows at lookup slots (`verify` treats a one-hot q
exactly like the point-mass rule). Every round records its sources (`extras`): `lookup_len` [B]
(proposed tokens that came from the lookup) and `match_len` [B] (the matched n-gram length, 0 = none).
"""
from __future__ import annotations

import torch
from torch import Tensor

from draftlab.decoding.api import DraftOutput, DrafterProposal, Proposal, ProposalStep
from draftlab.decoding.verify import SamplingParams
from draftlab.errors import DraftlabError
from draftlab.ngram import NgramIndex, StreamTexts  # noqa: F401  (NgramIndex re-exported: the index prompt lookup runs on)

HYBRID_MODES = ("switch", "splice")


def check_lookup(max_ngram: int, num_tokens: int, block_size: int, min_match: int = 1) -> None:
    """One-line errors naming the `pld.*` key (the library's check; the config checks the same)."""
    if max_ngram < 1:
        raise DraftlabError(f"pld.max_ngram={max_ngram} must be >= 1 (the longest n-gram looked up)")
    if not 1 <= num_tokens <= block_size - 1:
        raise DraftlabError(f"pld.num_tokens={num_tokens} must lie in 1..{block_size - 1} (1..S-1, S = block size "
                            f"{block_size}); lower it or raise drafter.block_size")
    if not 1 <= min_match <= max_ngram:
        raise DraftlabError(f"pld.min_match={min_match} must lie in 1..pld.max_ngram={max_ngram}")


class PromptLookup(StreamTexts):
    """The `pld` proposal step (no drafter). block_size: S of the verified block (slot 0 included).
    `TracksStreams` (start / extend / drop_streams) comes from `draftlab.ngram.StreamTexts`."""

    def __init__(self, block_size: int, max_ngram: int = 3, num_tokens: int = 7):
        check_lookup(max_ngram, num_tokens, block_size)
        super().__init__(max_ngram)
        self.block_size, self.num_tokens = block_size, num_tokens

    def verify_tokens(self, block: int) -> range:
        """The tokens a round can verify: slot 0 and 0..num_tokens proposals (no match: one AR step)."""
        return range(1, self.num_tokens + 2)

    # ---- the proposal ----------------------------------------------------------------------------------
    def propose(self, min_m: int = 1) -> tuple[list[list[int]], list[int]]:
        """Per stream: (lookup tokens, matched n-gram length) with a match of at least min_m tokens."""
        found = [s.lookup(self.num_tokens, min_m) for s in self.streams]
        return [f[0] for f in found], [f[1] for f in found]

    def __call__(self, draft: DraftOutput, sp: SamplingParams, generator: torch.Generator | None = None) -> Proposal:
        if len(self.streams) != draft.block_ids.shape[0]:
            raise ValueError(f"prompt lookup tracks {len(self.streams)} streams, the round has {draft.block_ids.shape[0]}")
        toks, match = self.propose()
        W = max((len(t) for t in toks), default=0)
        rows = [pad(t, W, s) for t, s in zip(toks, self.last_tokens())]
        dev = draft.block_ids.device
        return Proposal(torch.tensor(rows, dtype=torch.long, device=dev).reshape(len(rows), W), None, None,
                        extras=source_extras(toks, match))


def pad(tokens: list[int], width: int, slot0: int) -> list[int]:
    """tokens padded to `width` by repeating the last one (slot0 when empty)."""
    fill = tokens[-1] if tokens else slot0
    return (tokens + [fill] * width)[:width]


def source_extras(tokens: list[list[int]], match: list[int]) -> dict[str, Tensor]:
    """The round's per-stream source record: lookup_len [B], match_len [B] (CPU long)."""
    return {"lookup_len": torch.tensor([len(t) for t in tokens], dtype=torch.long),
            "match_len": torch.tensor(match, dtype=torch.long)}


class LookupHybrid:
    """`dflash-pld`: the lookup where an n-gram of ≥ min_match tokens matched, `inner` (the drafter's
    proposal step) otherwise; mode `switch` or `splice` (module docstring)."""

    def __init__(self, lookup: PromptLookup, vocab_size: int, inner: ProposalStep | None = None, mode: str = "switch",
                 min_match: int = 1):
        if mode not in HYBRID_MODES:
            raise DraftlabError(f"pld.hybrid={mode!r} is not valid; choose one of: {', '.join(HYBRID_MODES)}")
        check_lookup(lookup.max_ngram, lookup.num_tokens, lookup.block_size, min_match)
        self.lookup, self.inner, self.mode, self.min_match = lookup, inner or DrafterProposal(), mode, min_match
        self.vocab_size = vocab_size  # V of the target: the width of a mixed q at T>0

    def start(self, prompts, first) -> None:
        self.lookup.start(prompts, first)

    def extend(self, tokens, counts) -> None:
        self.lookup.extend(tokens, counts)

    def drop_streams(self, keep) -> None:
        self.lookup.drop_streams(keep)

    def __call__(self, draft: DraftOutput, sp: SamplingParams, generator: torch.Generator | None = None) -> Proposal:
        base = self.inner(draft, sp, generator)  # tokens [B, n], q [B, n, Vq] | None
        B, n = base.tokens.shape
        toks, match = self.lookup.propose(self.min_match)
        slot0 = self.lookup.last_tokens()
        rows, used = [], []
        for t, s in zip(toks, slot0):
            t = t[:n]
            if self.mode == "switch" and t:
                t = pad(t, n, s)  # the whole block from the lookup
            used.append(len(t))
            rows.append(t)
        L = torch.tensor(used, dtype=torch.long, device=base.tokens.device)  # [B] slots taken from the lookup
        look = torch.tensor([pad(r, n, s) for r, s in zip(rows, slot0)], dtype=torch.long,
                            device=base.tokens.device).reshape(B, n)
        from_lookup = torch.arange(n, device=L.device)[None, :] < L[:, None]  # [B, n]
        tokens = torch.where(from_lookup, look, base.tokens)
        extras = {**(base.extras or {}), **source_extras([t[:n] for t in toks], match),
                  "lookup_slots": torch.tensor(used, dtype=torch.long)}  # slots from the lookup (switch: n on a match)
        if base.q is None or not any(used):
            return Proposal(tokens, base.q, base.q_vocab, extras)
        q = full_vocab_q(base.q, base.q_vocab, self.vocab_size, from_lookup, tokens)
        return Proposal(tokens, q, None, extras)


def full_vocab_q(q: Tensor, q_vocab: Tensor | None, V: int, point: Tensor, tokens: Tensor) -> Tensor:
    """q [B, n, Vq] over q_vocab (None: already the target's V ids) -> [B, n, V] over the target
    vocabulary, with one-hot rows where point [B, n] (a lookup slot: a point mass on tokens [B, n])."""
    B, n = tokens.shape
    full = q if q_vocab is None else q.new_zeros(B, n, V).index_copy_(-1, q_vocab, q)  # [B, n, V]
    one_hot = torch.zeros_like(full).scatter_(-1, tokens[..., None], 1.0)
    return torch.where(point[..., None], one_hot, full)
