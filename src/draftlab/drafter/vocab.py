"""Draft vocabulary and the MASK token.

Draft vocabulary (EAGLE-3 / FR-Spec style): the drafter's output head covers only the N most
frequent target tokens of the reference data; draft index i stands for target id `vocab[i]`. The
head rows are the target's (frozen, shared) LM-head rows for those ids, so nothing new is learned
for the head. Verification always runs on the full target vocabulary, so decoding stays lossless;
a token outside the draft vocabulary simply can never be proposed (a guaranteed miss), which is
why coverage is reported.

MASK: a real row of the target's embedding table that never occurs in text (docs/algorithms.md "DFlash").
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import torch
from torch import Tensor

from draftlab.errors import DraftlabError

# Special tokens known to be absent from chat text, tried in order by `resolve_mask_token`.
MASK_CANDIDATES = ("<|MASK|>", "<empty_output>", "<|reserved_special_token_0|>")


def token_counts(token_lists: Iterable[Sequence[int]], vocab_size: int) -> np.ndarray:
    """Frequency of every target id over the given sequences; [V] int64."""
    counts = np.zeros(vocab_size, dtype=np.int64)
    for ids in token_lists:
        a = np.asarray(ids, dtype=np.int64)
        if a.size:
            counts += np.bincount(a, minlength=vocab_size)[:vocab_size]
    return counts


def build_draft_vocab(counts: np.ndarray, size: int, always: Sequence[int] = ()) -> Tensor:
    """The `size` most frequent ids (ties -> smaller id first) among ids seen at least once, plus
    `always` (e.g. EOS). Returns [Vd] long, Vd <= size, ordered by decreasing frequency."""
    order = np.lexsort((np.arange(len(counts)), -counts))  # by count desc, then id asc
    top = order[counts[order] > 0][:size].tolist()
    missing = [int(t) for t in dict.fromkeys(always) if 0 <= int(t) < len(counts) and int(t) not in top]
    if missing:
        top = top[: max(size - len(missing), 0)] + missing
    return torch.tensor(top[:size], dtype=torch.long)


def coverage(vocab: Tensor | None, counts: np.ndarray) -> float:
    """Share of the counted token occurrences that the draft vocabulary covers (1.0 for full)."""
    total = counts.sum()
    if vocab is None or total == 0:
        return 1.0
    return float(counts[vocab.cpu().numpy()].sum() / total)


def target_to_draft(vocab: Tensor | None, vocab_size: int) -> Tensor:
    """[V] long: draft index of each target id, -1 when outside the draft vocabulary."""
    if vocab is None:
        return torch.arange(vocab_size)
    m = torch.full((vocab_size,), -1, dtype=torch.long, device=vocab.device)
    m[vocab] = torch.arange(len(vocab), device=vocab.device)
    return m


def resolve_mask_token(requested: int, tokenizer, vocab_size: int) -> int:
    """The MASK id: `requested` when >= 0, else the tokenizer's mask token, else the first of
    MASK_CANDIDATES it knows, else the first embedding row beyond the tokenizer (Qwen3: 151669)."""
    if requested >= 0:
        if requested >= vocab_size:
            raise DraftlabError(f"drafter.mask_token_id={requested} is outside the target's embedding table ({vocab_size} rows)")
        return requested
    if tokenizer is None:
        raise DraftlabError("drafter.mask_token_id=-1 (auto) needs the target's tokenizer; set drafter.mask_token_id explicitly")
    mid = getattr(tokenizer, "mask_token_id", None)
    if isinstance(mid, int) and 0 <= mid < vocab_size:
        return mid
    table = tokenizer.get_vocab()
    for name in MASK_CANDIDATES:
        if name in table and table[name] < vocab_size:
            return int(table[name])
    if len(tokenizer) < vocab_size:
        return len(tokenizer)
    raise DraftlabError("no reserved token found for MASK in the target's tokenizer; set drafter.mask_token_id to an id that never occurs in text")
