"""Copying vs looping: how much of an answer a lookup-based method could have found by matching n-grams.

Pure functions over token ids (no model). Per answer:
- `copy_share`: the share of output tokens that lie inside some `COPY_SPAN`-token window of the output that
  also occurs in the prompt (the tokens prompt lookup can propose from the prompt);
- `repeat_share`: the share of output tokens inside some `COPY_SPAN`-token window that already occurred
  earlier in the output (starting at an earlier position; overlap allowed) — what lookup finds in the
  answer itself. The two shares are not exclusive: a token can do both;
- `looped`: the answer fell into a loop — some `LOOP_SPAN`-token span occurs again later in the answer
  (a later start, overlap allowed: a run of 9 equal tokens counts). SmolLM2's greedy answers often do; a
  larger target would not, so verdicts are also given on the prompts without loops
  (draftlab.bench.uncertainty).
"""
from __future__ import annotations

from typing import Sequence

COPY_SPAN = 4  # n-gram length of a copy or a repeat (prompt lookup matches up to pld.max_ngram=3 tokens, then proposes)
LOOP_SPAN = 8  # an 8-token span repeated later in the answer = a loop


def _grams(ids: Sequence[int], n: int) -> list[tuple[int, ...]]:
    return [tuple(ids[i:i + n]) for i in range(len(ids) - n + 1)]


def _cover(length: int, starts: list[int], n: int) -> float | None:
    """Share of `length` positions covered by windows [s, s + n) for s in `starts`; None for an empty answer."""
    if length == 0:
        return None
    hit = [False] * length
    for s in starts:
        for j in range(s, min(s + n, length)):
            hit[j] = True
    return sum(hit) / length


def copy_share(prompt: Sequence[int], output: Sequence[int], n: int = COPY_SPAN) -> float | None:
    """Share of output tokens inside an n-token output window that occurs in the prompt."""
    seen = set(_grams(prompt, n))
    return _cover(len(output), [i for i, g in enumerate(_grams(output, n)) if g in seen], n)


def repeat_starts(output: Sequence[int], n: int) -> list[int]:
    """Start positions of the output's n-token windows that occurred at an earlier start."""
    first: dict[tuple[int, ...], int] = {}
    out = []
    for i, g in enumerate(_grams(output, n)):
        if g in first:
            out.append(i)
        else:
            first[g] = i
    return out


def repeat_share(output: Sequence[int], n: int = COPY_SPAN) -> float | None:
    """Share of output tokens inside an n-token window that already occurred earlier in the output."""
    return _cover(len(output), repeat_starts(output, n), n)


def looped(output: Sequence[int], n: int = LOOP_SPAN) -> bool:
    """Whether some n-token span of the output occurs again later in it."""
    return bool(repeat_starts(output, n))


def reading(prompt: Sequence[int], output: Sequence[int]) -> dict:
    """{copy_share, repeat_share, loop} of one answer."""
    return {"copy_share": copy_share(prompt, output), "repeat_share": repeat_share(output), "loop": looped(output)}


def batch_reading(prompts: Sequence[Sequence[int]], outputs: Sequence[Sequence[int]]) -> dict:
    """The reading of one batch (the bootstrap's unit): shares weighted by output length, `loop` if any answer
    of the batch looped."""
    rows = [(len(o), reading(p, o)) for p, o in zip(prompts, outputs)]
    total = sum(n for n, _ in rows)

    def share(key: str) -> float | None:
        return sum(n * r[key] for n, r in rows if r[key] is not None) / total if total else None

    return {"copy_share": share("copy_share"), "repeat_share": share("repeat_share"),
            "loop": any(r["loop"] for _, r in rows)}
