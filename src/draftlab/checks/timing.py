"""Timing arms so that a figure does not depend on what ran before it (the accelerator check's harness).

A first call on a new shape pays one-off costs (an attention backend's plan, cuBLAS heuristics, an allocator
segment, a compiled graph's capture): 50-80 ms on an H200, charged to whichever arm met the shape first. So:
- **warm-up per arm**: every arm first decodes the very prompts it is timed on, untimed, and so meets its own
  shape sequence before any clock runs;
- **rotation**: repetition r times the arms starting from arm r (mod the count), so no arm is always first;
- **the statistic** is stated: per phase and per round, the median and the 20th percentile over the timed
  rounds of all repetitions (SGLang's speculative benchmark reports p20 of the step time);
- **a re-time**: the first arm is timed again at the end (as many decodes as before); the ratio of its p20 round
  time to the first timing's (spikes from elsewhere only ever add time, so p20 is their least sensitive figure)
  is a sanity gate;
- **GPU-busy time** (`gpu_busy`): one further decode per arm under `torch.profiler`, its phases annotated
  (`decoding.common.PhaseTimer.annotate`), gives the device time of the kernels each phase launched — beside the
  CUDA-event time, which also counts the device idling while the host prepares the next launch.

An arm is any callable that runs one whole decode and returns its `Rounds` (`rounds_of` reads them off a
`GenerationResult`), so the harness times the engine of the day and tests time fakes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from draftlab.stats import quantile


@dataclass
class Rounds:
    """One decode's rounds: `ms[r][p]` = milliseconds of phase `phases[p]` in round r."""

    phases: tuple[str, ...]
    ms: list[list[float]] = field(default_factory=list)


Arm = Callable[[], Rounds]


def rounds_of(result) -> Rounds:
    """The rounds of a `draftlab.decoding.GenerationResult` (its `round_times` [R, P] seconds, `phases`)."""
    rt = result.round_times
    return Rounds(tuple(result.phases), [[1e3 * float(x) for x in row] for row in rt.tolist()])


def summarize(rounds: list[Rounds]) -> dict:
    """Median and p20 of each phase and of the round total over every round of `rounds` (same phases)."""
    phases = rounds[0].phases if rounds else ()
    rows = [r for x in rounds for r in x.ms]
    out = {"rounds": len(rows), "phases": list(phases),
           "median_ms": {p: quantile([r[i] for r in rows], 0.5) for i, p in enumerate(phases)},
           "p20_ms": {p: quantile([r[i] for r in rows], 0.2) for i, p in enumerate(phases)}}
    totals = [sum(r) for r in rows]
    out["round_median_ms"], out["round_p20_ms"] = quantile(totals, 0.5), quantile(totals, 0.2)
    return out


def rotations(names: list[str], reps: int) -> list[list[str]]:
    """The order of each repetition: repetition r starts at arm r mod len(names)."""
    n = len(names)
    return [names[r % n:] + names[:r % n] for r in range(reps)] if n else []


def time_arms(arms: dict[str, Arm], reps: int = 2, warm: bool = True, retime: bool = True) -> dict:
    """Time each arm (name -> one whole decode) `reps` times in rotated order after one untimed warm-up decode
    each; the first arm is re-timed at the end. -> {"orders", "warmed", "arms": name -> summary, "retime"}."""
    names = list(arms)
    if warm:
        for name in names:
            arms[name]()
    timed: dict[str, list[Rounds]] = {n: [] for n in names}
    orders = rotations(names, reps)
    for order in orders:
        for name in order:
            timed[name].append(arms[name]())
    out = {"orders": orders, "warmed": warm, "statistic": "median and p20 over the timed rounds of all repetitions",
           "arms": {n: summarize(timed[n]) for n in names}}
    if retime and names:  # as many decodes as it was timed with; judged on p20 (spikes only ever add time)
        first = names[0]
        again = summarize([arms[first]() for _ in range(max(reps, 1))])
        before = out["arms"][first]
        out["retime"] = {"arm": first, "round_p20_ms": again["round_p20_ms"], "round_median_ms": again["round_median_ms"],
                         "ratio": (again["round_p20_ms"] / before["round_p20_ms"]) if before["round_p20_ms"] else None,
                         "median_ratio": (again["round_median_ms"] / before["round_median_ms"])
                         if before["round_median_ms"] else None}
    return out


def gpu_busy(decode: Arm, device) -> dict | None:
    """Per phase, the device time (ms per round) of the kernels the phase launched, from one decode under
    torch.profiler with the phases annotated; None off CUDA (a CPU has no separate device timeline)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from draftlab.decoding.common import PhaseTimer

    if getattr(device, "type", str(device)) != "cuda":
        return None
    PhaseTimer.annotate = True
    try:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            r = decode()
            torch.cuda.synchronize(device)
    finally:
        PhaseTimer.annotate = False
    n = max(len(r.ms), 1)
    busy = {p: 0.0 for p in r.phases}
    for ev in prof.key_averages():
        key = ev.key
        if key.startswith(PhaseTimer.ANNOTATION):
            i = int(key[len(PhaseTimer.ANNOTATION):])
            if i < len(r.phases):
                busy[r.phases[i]] += float(getattr(ev, "device_time_total", 0.0)) / 1e3 / n  # µs -> ms per round
    busy["round"] = sum(busy[p] for p in r.phases)
    return busy
