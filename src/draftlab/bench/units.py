"""The benchmark's unit of resampling (`draftlab.bench.uncertainty`): one batch of a per-suite run, which is one prompt
at `benchmark.batch_size: 1`. `collect_units` gathers, per (suite, temperature, arm), each unit's tokens, wall seconds,
τ (the sum of its requests' τ and their count), copy / loop reading and oracle τ (`Units`); `per_prompt` writes them
for the detail file (the sizing rule and the explorer read them)."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from draftlab.bench.copying import batch_reading
from draftlab.bench.metrics import oracle_taus, tkey
from draftlab.bench.runner import BatchRun


@dataclass
class Units:
    """One (suite, temperature, arm): per-unit arrays [U] in batch order."""

    prompt_ids: list[list[str]] = field(default_factory=list)
    tokens: list[float] = field(default_factory=list)
    wall_s: list[float] = field(default_factory=list)
    tau_sum: list[float] = field(default_factory=list)  # Σ per-request τ (requests with ≥ 1 round)
    tau_n: list[float] = field(default_factory=list)  # number of those requests
    copy_share: list = field(default_factory=list)  # draftlab.bench.copying.batch_reading per unit
    repeat_share: list = field(default_factory=list)
    loop: list[bool] = field(default_factory=list)
    oracle: dict[str, list] = field(default_factory=dict)  # oracle metric -> per unit oracle τ (None: no records)
    gaps: dict[str, list] = field(default_factory=dict)  # oracle metric -> per unit, per sequence: oracle τ − τ

    def arrays(self) -> dict[str, np.ndarray]:
        return {k: np.asarray(getattr(self, k), dtype=float) for k in ("tokens", "wall_s", "tau_sum", "tau_n")}

    def keys(self) -> list[str]:
        """One key per unit: its prompt ids (how units of two arms are matched)."""
        return [",".join(p) for p in self.prompt_ids]


def collect_units(runs: list[BatchRun]) -> dict[tuple[str, str, str], Units]:
    """(suite, temperature key, arm) -> Units of the per-suite (non-sweep) runs, in run order."""
    out: dict[tuple[str, str, str], Units] = defaultdict(Units)
    for r in runs:
        if r.sweep:
            continue
        u = out[(r.suite, tkey(r.temperature), r.arm)]
        taus = [sum(a) / len(a) + 1 for a in r.result.accepted if a]
        u.prompt_ids.append(list(r.prompt_ids))
        u.tokens.append(r.result.num_tokens)
        u.wall_s.append(r.result.wall_s)
        u.tau_sum.append(sum(taus))
        u.tau_n.append(len(taus))
        rd = batch_reading(r.prompts, r.result.tokens)
        u.copy_share.append(rd["copy_share"])
        u.repeat_share.append(rd["repeat_share"])
        u.loop.append(rd["loop"])
        seq_tau = {i: sum(a) / len(a) + 1 for i, a in enumerate(r.result.accepted) if a}
        for name, by_stream in oracle_taus(r).items():
            u.oracle.setdefault(name, []).append(sum(by_stream.values()) / len(by_stream) if by_stream else None)
            u.gaps.setdefault(name, []).append([o - seq_tau[i] for i, o in sorted(by_stream.items()) if i in seq_tau])
    return dict(out)


def per_prompt(units: Units, headline: int | None = None) -> dict:
    """Per-unit values for the detail file (the sizing rule and the explorer read them); `headline`: how many
    of the units are the headline sample's (the rest are a pair's extra prompts, marked `extra`)."""
    a = units.arrays()
    with np.errstate(invalid="ignore", divide="ignore"):
        tau = np.where(a["tau_n"] > 0, a["tau_sum"] / np.maximum(a["tau_n"], 1), np.nan)
        tps = np.where(a["wall_s"] > 0, a["tokens"] / np.maximum(a["wall_s"], 1e-12), np.nan)
    return {"prompt_id": units.keys(), "tau": _list(tau), "tokens": a["tokens"].tolist(),
            "wall_s": _list(a["wall_s"]), "tokens_per_s": _list(tps),
            "copy_share": [None if x is None else round(x, 4) for x in units.copy_share],
            "repeat_share": [None if x is None else round(x, 4) for x in units.repeat_share], "loop": list(units.loop),
            **{name: [None if x is None else round(x, 6) for x in v] for name, v in units.oracle.items()
               if any(x is not None for x in v)},
            # per unit, per sequence (a unit is one batch): the base's headroom gaps, whose spread over sequences is
            # the headroom's noise (draftlab.bench.oracles.headroom_noise)
            **{f"{name}_gaps": [[round(g, 6) for g in gs] for gs in v] for name, v in units.gaps.items()
               if any(v)},
            **({"extra": [i >= headline for i in range(len(units.tokens))]}
               if headline is not None and headline < len(units.tokens) else {})}


def _list(x: np.ndarray) -> list:
    return [None if not np.isfinite(v) else round(float(v), 6) for v in x]
