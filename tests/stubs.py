"""Stub drafters implementing the drafter Protocols of `draftlab.decoding.api`, for tests and plumbing checks.

- `OracleDrafter` cheats: it keeps each stream's committed tokens and runs the target greedily to
  propose the block. mode "right" (always right at T=0), "wrong" (always wrong), "random" (uniform
  random tokens) or "mixed" (each slot right with probability p_right). It also checks the engine's
  bookkeeping: block positions, context positions, and (check_feats) that the context features it is
  handed are the target's taps of the committed tokens.
- `FixedDrafter` proposes from one fixed logits table [n, V] every round (sampling tests).
- `RankedOracle` tracks each stream's committed text (its state is `TracksStreams`) and puts the target's greedy
  token of every slot at a random rank of its top-K (or outside it): a tree of its candidates accepts where the
  chain of its top-1 does not (tree tests).
- `WordTokenizer`: one id per whitespace-separated word, no chat template (prompt-selection tests).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class StubDraftOutput:
    logits: Tensor  # [B, S, Vd] fp32
    hidden: Tensor  # [B, S, H]
    vocab: Tensor | None = None  # [Vd] draft index -> target id
    block_ids: Tensor | None = None  # [B, S] the block's input ids (slot 0 = last committed token)

    def topk(self, k: int) -> tuple[Tensor, Tensor]:
        vals, idx = self.logits.topk(min(k, self.logits.shape[-1]), dim=-1)
        return (idx if self.vocab is None else self.vocab[idx]), vals


class StubState:
    def __init__(self, hist: list[list[int]]):
        self.hist = hist  # committed tokens per stream (prompt included)
        self.started = False
        self.slot0: list[int] = []
        self.proposed: list[list[int]] = []

    def drop_streams(self, keep: Tensor) -> None:
        k = keep.tolist()
        self.hist = [h for h, x in zip(self.hist, k) if x]
        self.slot0 = [s for s, x in zip(self.slot0, k) if x]
        self.proposed = [p for p, x in zip(self.proposed, k) if x]


class OracleDrafter:
    def __init__(self, target, block_size: int = 4, mode: str = "right", p_right: float = 0.5, seed: int = 0,
                 taps=(0,), check_feats: bool = False, vocab: Tensor | None = None):
        self.target, self.block_size, self.mode, self.p_right = target, block_size, mode, p_right
        self.mask_token_id = 0
        self.target_layer_ids = list(taps)
        self.check_feats = check_feats
        self.vocab = vocab
        self.g = torch.Generator().manual_seed(seed)
        self.prompts: list[list[int]] = []
        self.max_ctx_err = 0.0

    def new_state(self, batch: int, capacity: int = 0) -> StubState:
        assert len(self.prompts) == batch, "set drafter.prompts to the prompts before generating"
        return StubState([list(p) for p in self.prompts])

    def extend_context(self, state: StubState, feats: Tensor, valid: Tensor, positions: Tensor) -> None:
        counts = valid.sum(-1).tolist()
        if state.started:  # slot 0 + accepted proposals became committed context
            for b, c in enumerate(counts):
                state.hist[b] += [state.slot0[b]] + state.proposed[b][: c - 1]
        state.started = True
        for b in range(len(state.hist)):
            L = len(state.hist[b])
            pos = positions[b][valid[b]].tolist()
            assert pos == list(range(L - counts[b], L)), f"context positions {pos} != {L - counts[b]}..{L - 1}"
            if self.check_feats:
                ref = self.target(torch.tensor([state.hist[b]]), taps=self.target_layer_ids).taps[0, L - counts[b]:]
                self.max_ctx_err = max(self.max_ctx_err, float((feats[b][valid[b]].float() - ref).abs().max()))

    def _greedy(self, seq: list[int], n: int) -> list[int]:
        out = []
        for _ in range(n):
            nxt = int(self.target(torch.tensor([seq + out])).logits[0, -1].argmax())
            out.append(nxt)
        return out

    def draft(self, state: StubState, ids: Tensor, positions: Tensor) -> StubDraftOutput:
        B, S = ids.shape
        n, V = S - 1, self.target.vocab_size
        assert S == self.block_size and bool((ids[:, 1:] == self.mask_token_id).all())
        state.slot0 = ids[:, 0].tolist()
        state.proposed = []
        for b in range(B):
            assert int(positions[b, 0]) == len(state.hist[b]), "slot 0 must sit at the next logical position"
            truth = torch.tensor(self._greedy(state.hist[b] + [state.slot0[b]], n))
            rnd = torch.randint(0, V, (n,), generator=self.g)
            if self.mode == "right":
                prop = truth
            elif self.mode == "wrong":
                prop = (truth + 1) % V
            elif self.mode == "random":
                prop = rnd
            else:
                right = torch.rand(n, generator=self.g) < self.p_right
                prop = torch.where(right, truth, (truth + 1 + rnd % (V - 1)) % V)
            state.proposed.append(prop.tolist())
        prop = torch.tensor(state.proposed).reshape(B, n)
        logits = torch.zeros(B, S, V)
        logits[:, 1:].scatter_(-1, prop[..., None], 10.0)
        logits[:, 1:] += 0.01 * torch.randn(B, n, V, generator=self.g)  # distinct top-K ranks
        hidden = torch.zeros(B, S, self.target.hidden_size)
        if self.vocab is not None:
            logits = logits[..., self.vocab]
        return StubDraftOutput(logits, hidden, self.vocab, ids)


class FixedDrafter:
    """Fixed proposal logits [n, Vd] for every block (Vd = target vocab unless vocab maps it)."""

    def __init__(self, logits: Tensor, hidden_size: int = 8, taps=(0,), vocab: Tensor | None = None):
        self.table = logits.float()
        self.block_size = logits.shape[0] + 1
        self.mask_token_id = 0
        self.target_layer_ids = list(taps)
        self.hidden_size = hidden_size
        self.vocab = vocab

    def new_state(self, batch: int, capacity: int = 0) -> StubState:
        return StubState([[] for _ in range(batch)])

    def extend_context(self, state, feats, valid, positions) -> None:
        pass

    def draft(self, state, ids: Tensor, positions: Tensor) -> StubDraftOutput:
        B, S = ids.shape
        logits = torch.cat([torch.zeros(1, self.table.shape[1]), self.table])[None].expand(B, S, -1).clone()
        return StubDraftOutput(logits, torch.zeros(B, S, self.hidden_size), self.vocab, ids)


class TrackedState:
    """Committed tokens per stream, fed by the engine (`TracksStreams`)."""

    def __init__(self, batch: int):
        self.hist: list[list[int]] = [[] for _ in range(batch)]

    def start(self, prompts, first: Tensor) -> None:
        self.hist = [list(p) + [int(f)] for p, f in zip(prompts, first.tolist())]

    def extend(self, tokens: Tensor, counts: Tensor) -> None:
        for h, row, c in zip(self.hist, tokens.tolist(), counts.tolist()):
            h += row[:c]

    def drop_streams(self, keep: Tensor) -> None:
        self.hist = [h for h, k in zip(self.hist, keep.tolist()) if k]


class RankedOracle:
    """The target's greedy continuation of the committed text, each slot's true token at rank r of the draft's
    logits with probability `ranks[r]` (the rest of the mass: outside the top-len(ranks)); the other ranks random."""

    def __init__(self, target, block_size: int = 5, ranks=(0.5, 0.2, 0.1), seed: int = 0, taps=(0,),
                 check_feats: bool = False):
        self.target, self.block_size, self.ranks = target, block_size, torch.tensor(ranks)
        self.mask_token_id = 0
        self.target_layer_ids = list(taps)
        self.g = torch.Generator().manual_seed(seed)
        self.truth: Tensor | None = None  # [B, S-1] the last block's true tokens
        self.check_feats, self.max_ctx_err, self.ctx_checked = check_feats, 0.0, 0  # context = the target's taps?

    def new_state(self, batch: int, capacity: int = 0) -> TrackedState:
        return TrackedState(batch)

    def extend_context(self, state, feats, valid, positions) -> None:
        """With check_feats: every valid context row must be the target's taps of the committed text at its position
        (after a round: the root and the accepted nodes, whichever branch of a tree they came from)."""
        if not self.check_feats or not state.hist[0]:
            return
        for b in range(valid.shape[0]):
            pos = positions[b][valid[b]].tolist()
            if not pos:
                continue
            ref = self.target(torch.tensor([state.hist[b][:max(pos) + 1]]), taps=self.target_layer_ids).taps[0]
            self.max_ctx_err = max(self.max_ctx_err, float((feats[b][valid[b]].float() - ref[pos]).abs().max()))
            self.ctx_checked += len(pos)

    def draft(self, state: TrackedState, ids: Tensor, positions: Tensor) -> StubDraftOutput:
        B, S = ids.shape
        V = self.target.vocab_size
        logits = torch.randn(B, S, V, generator=self.g)
        self.truth = torch.zeros(B, S - 1, dtype=torch.long)
        for b in range(B):
            seq = state.hist[b]
            assert seq[-1] == int(ids[b, 0]), "slot 0 must be the last committed token"
            out = []
            for _ in range(S - 1):
                out.append(int(self.target(torch.tensor([seq + out])).logits[0, -1].argmax()))
            self.truth[b] = torch.tensor(out)
            for j, tok in enumerate(out, start=1):
                u, cum, rank = float(torch.rand(1, generator=self.g)), 0.0, None
                for r, pr in enumerate(self.ranks.tolist()):
                    cum += pr
                    if u < cum:
                        rank = r
                        break
                row = logits[b, j]
                order = row.argsort(descending=True)
                if rank is None:  # the truth outside the top ranks
                    row[tok] = float(row[order[len(self.ranks) + 2]]) - 1e-3
                else:
                    row[tok] = float(row[order[rank]]) + 1e-3 if tok != int(order[rank]) else float(row[tok])
        return StubDraftOutput(logits, torch.zeros(B, S, self.target.hidden_size), None, ids)

    def block_input(self, state, last: Tensor) -> Tensor:
        return torch.cat([last[:, None], last.new_full((last.shape[0], self.block_size - 1), self.mask_token_id)], 1)


class WordTokenizer:
    """A whitespace "tokenizer" (ids 0..n-1 for n words): enough to test prompt selection and truncation."""

    chat_template = None

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": list(range(len(text.split())))}

    def decode(self, ids):
        return " ".join("w" for _ in ids)


def sharp_drafter(target, block_size: int, taps: list[int], mask_id: int, vocab=None, seed: int = 0, std: float = 0.2,
                  arch_kw: dict | None = None):
    """A tiny DFlash drafter on `target` whose linear weights are drawn with std `std` (a sharper q than the
    0.02 init), for tests that need the drafter's distribution to matter (SpecOPD, chunking). arch_kw: more
    `arch_from_target` keys (e.g. {"seed": "lookup", "seed_logit": True} for a seeded drafter)."""
    from draftlab.drafter import DFlashDrafter, DrafterDesign, arch_from_target

    torch.manual_seed(seed)
    d = DFlashDrafter.from_target(arch_from_target(target, DrafterDesign(block_size, 1, taps, mask_id,
                                                   0 if vocab is None else len(vocab), **(arch_kw or {}))), target, vocab)
    with torch.no_grad():
        for m in d.modules():
            if isinstance(m, torch.nn.Linear):
                m.weight.normal_(0, std)
    return d


def objective_terms(arm: str, target, drafter, batch, W: int, T: float, chunk: int = 0, vchunk: int = 0):
    """One SpecOPD objective's terms on `batch` (arm: specopd | first_rejection | offpolicy_tv | sequential), with
    row chunking `chunk` and vocabulary chunking `vchunk` (0 = off): the chunked-vs-unchunked tests' one call."""
    from draftlab.specopd.terms import draft_opd_terms, offpolicy_tv_terms, specopd_terms

    if arm == "offpolicy_tv":
        return offpolicy_tv_terms(target, drafter, batch, W, temperature=T, chunk_rows=chunk)
    if arm == "sequential":
        return draft_opd_terms(target, drafter, batch, W, rounds=2, temperature=T, chunk_rows=chunk, vocab_chunk=vchunk)
    return specopd_terms(target, drafter, batch, W, T, seed=3, step=1, first_rejection=arm == "first_rejection",
                         chunk_rows=chunk, vocab_chunk=vchunk)
