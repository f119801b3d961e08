"""Per-position reading: τ and tokens/s as a function of where in the answer a round starts, so a reader sees
where a copy-based method gains (lookup grows as the answer gives it more to match).

A round of a speculative arm starts at output index p = 1 + Σ (acc + 1) of the stream's earlier rounds
(index 0 is the token the prefill yields); an AR step commits index r + 1. Rounds are binned by their start
(`WIDTH`-token bins; `FIRST` = the first 32 tokens vs the later ones) and pooled over prompts: per bin,
τ = Σ committed tokens ÷ rounds, tokens/s = Σ committed tokens ÷ Σ round seconds (decode only: the prefill is
in no bin). Committed tokens are cut at the answer's end (EOS, max_new_tokens). Only batches of one stream are
read (the per-suite runs at the default `benchmark.batch_size: 1`): a round shared by several streams has no
time of its own per stream. Arms without per-round times (Hugging Face `generate`) have no reading.
"""
from __future__ import annotations

from dataclasses import dataclass

from draftlab.bench.runner import BatchRun

WIDTH = 32  # tokens per bin
FIRST = 32  # the first FIRST tokens vs the later ones


@dataclass
class Bin:
    rounds: int = 0
    tokens: int = 0
    seconds: float = 0.0

    def add(self, other: "Bin") -> None:
        self.rounds += other.rounds
        self.tokens += other.tokens
        self.seconds += other.seconds

    def row(self) -> dict:
        return {"rounds": self.rounds, "tokens": self.tokens, "seconds": round(self.seconds, 6),
                "tau": self.tokens / self.rounds if self.rounds else None,
                "tokens_per_s": self.tokens / self.seconds if self.seconds > 0 else None}


def round_spans(run: BatchRun) -> list[tuple[int, int, float]] | None:
    """(start index, committed tokens, seconds) per round of a one-stream run; None when not readable."""
    res = run.result
    if len(res.tokens) != 1 or res.round_times.ndim != 2 or res.round_times.shape[0] == 0:
        return None
    secs = res.round_times.sum(-1).tolist()  # [R]
    length = len(res.tokens[0])
    if res.accepted:  # speculative: acc per round
        acc = res.accepted[0]
        if len(acc) != len(secs):
            return None
        out, p = [], 1
        for a, s in zip(acc, secs):
            out.append((p, max(0, min(a + 1, length - p)), s))
            p += a + 1
        return out
    return [(r + 1, 1 if r + 1 < length else 0, s) for r, s in enumerate(secs)]  # AR: one token per step


def bins(runs: list[BatchRun], width: int = WIDTH) -> dict[int, Bin]:
    """Bin start -> pooled Bin over the readable runs."""
    out: dict[int, Bin] = {}
    for run in runs:
        for p, n, s in round_spans(run) or []:
            b = out.setdefault(p // width * width, Bin())
            b.add(Bin(1, n, s))
    return dict(sorted(out.items()))


def segments(runs: list[BatchRun], first: int = FIRST) -> dict:
    """{first: Bin row (rounds starting before index `first`), later: Bin row (the rest)}."""
    seg = {"first": Bin(), "later": Bin()}
    for run in runs:
        for p, n, s in round_spans(run) or []:
            seg["first" if p < first else "later"].add(Bin(1, n, s))
    return {k: v.row() for k, v in seg.items()}


def reading(runs: list[BatchRun], base: list[BatchRun] | None = None, width: int = WIDTH, first: int = FIRST) -> dict | None:
    """The per-position reading of one (suite, temperature, arm) group: bins and the two segments, each with
    `speedup` = its tokens/s ÷ the `base` runs' (AR on the same prompts) in the same bin or segment."""
    if not any(round_spans(r) for r in runs):
        return None
    b, seg = bins(runs, width), segments(runs, first)
    bb = bins(base, width) if base else {}
    bseg = segments(base, first) if base else {}

    def speedup(row: dict, ref: dict | None) -> float | None:
        t, r = row.get("tokens_per_s"), (ref or {}).get("tokens_per_s")
        return t / r if t and r else None

    rows = []
    for start, v in b.items():
        row = {"start": start, **v.row()}
        row["speedup"] = speedup(row, bb[start].row() if start in bb else None)
        rows.append(row)
    for k, row in seg.items():
        row["speedup"] = speedup(row, bseg.get(k))
    return {"width": width, "first": first, "bins": rows, "segments": seg}
