"""Uncertainty of the benchmark's numbers: bootstrap confidence intervals over prompts, paired across
arms, and the sample-size rule for the interval on τ.

- Unit of resampling: one batch of the per-suite runs, which is one prompt at the default
  `benchmark.batch_size: 1`. Every arm decodes the same batches (draftlab.bench.runner), so one
  bootstrap replicate draws one multiset of batch indices per suite and applies it to every arm and
  temperature: a speedup (arm tokens/s ÷ AR tokens/s), a Δτ or a tokens/s ratio of two arms is
  *paired* — the prompt-to-prompt variation both arms share cancels.
- Suites are strata: prompts are resampled within their suite, and a replicate's summary is the mean
  over suites, the same formula as `draftlab.bench.metrics.summary`. A suite with a single prompt has no
  interval (nor has any summary or pair that includes it): one prompt says nothing about the spread.
- Per unit: τ as the sum of per-request τ and the count of requests that had a round (the estimator of
  `group_metrics`: per request, then averaged), tokens and wall seconds (aggregate tokens/s =
  Σ tokens / Σ seconds). The point estimates are `compute()`'s; the intervals are percentile intervals.
- Pairs (`benchmark.pairs`): Δτ = τ_a − τ_b and the tokens/s ratio a ÷ b (mean over suites of the
  per-suite ratios), each with its own paired interval; `exceeds_noise` says whether the interval
  excludes 0 (Δτ) or 1 (ratio). The name `best` stands for the arm with the highest mean speedup at
  that temperature (other than the pair's other arm and AR) — chosen on the same data, so its
  interval is optimistic.
- Sizing: `prompts_for_halfwidth` is the normal-approximation rule n = ⌈z² Σ_s sd_s² / (S² h²)⌉ for the
  interval on the mean over S suites of τ, from a pilot's per-prompt standard deviations.
"""
from __future__ import annotations

import math
import warnings
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from draftlab.bench.metrics import tkey
from draftlab.bench.runner import BatchRun

BEST = "best"


@dataclass
class Units:
    """One (suite, temperature, arm): per-unit arrays [U] in batch order."""

    prompt_ids: list[list[str]] = field(default_factory=list)
    tokens: list[float] = field(default_factory=list)
    wall_s: list[float] = field(default_factory=list)
    tau_sum: list[float] = field(default_factory=list)  # Σ per-request τ (requests with ≥ 1 round)
    tau_n: list[float] = field(default_factory=list)  # number of those requests

    def arrays(self) -> dict[str, np.ndarray]:
        return {k: np.asarray(getattr(self, k), dtype=float) for k in ("tokens", "wall_s", "tau_sum", "tau_n")}


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
    return dict(out)


def per_prompt(units: Units) -> dict:
    """Per-unit values for the detail file (the sizing rule and the explorer read them)."""
    a = units.arrays()
    with np.errstate(invalid="ignore", divide="ignore"):
        tau = np.where(a["tau_n"] > 0, a["tau_sum"] / np.maximum(a["tau_n"], 1), np.nan)
        tps = np.where(a["wall_s"] > 0, a["tokens"] / np.maximum(a["wall_s"], 1e-12), np.nan)
    return {"prompt_id": [",".join(p) for p in units.prompt_ids], "tau": _list(tau), "tokens": a["tokens"].tolist(),
            "wall_s": _list(a["wall_s"]), "tokens_per_s": _list(tps)}


def _list(x: np.ndarray) -> list:
    return [None if not np.isfinite(v) else round(float(v), 6) for v in x]


def _interval(rep: np.ndarray, level: float) -> list[float] | None:
    rep = rep[np.isfinite(rep)]
    if rep.size == 0:
        return None
    lo, hi = np.percentile(rep, [50 * (1 - level), 50 * (1 + level)])
    return [round(float(lo), 6), round(float(hi), 6)]


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def replicates(units: dict[tuple[str, str, str], Units], n_boot: int, seed: int = 0, ar_arm: str = "ar") -> dict:
    """Bootstrap replicates [B] of τ, tokens/s and speedup per (suite, temperature key, arm), and their means
    over suites per (temperature key, arm). Row 0 of every weight matrix is all ones (the point estimate)."""
    rng = np.random.default_rng(seed)
    suites = sorted({s for s, _, _ in units})
    weights = {}
    for s in suites:
        sizes = {len(u.tokens) for (s2, _, _), u in units.items() if s2 == s}
        n = max(sizes)
        w = rng.multinomial(n, np.full(n, 1.0 / n), size=n_boot).astype(float)  # [B, U]
        if n < 2:  # one prompt says nothing about the spread: no interval (NaN replicates), not a zero-width one
            w[:] = np.nan
        weights[s] = np.vstack([np.ones((1, n)), w])  # [1 + B, U]
    per: dict = {}
    for (s, tk, arm), u in units.items():
        w, a = weights[s], u.arrays()
        if w.shape[1] != a["tokens"].shape[0]:  # an arm that did not run every batch: no paired resampling
            continue
        tau = _ratio(w @ a["tau_sum"], w @ a["tau_n"])
        if not np.isfinite(tau).any():  # AR: τ = 1 by definition
            tau = np.ones(w.shape[0])
        per[(s, tk, arm)] = {"tau": tau, "tokens_per_s": _ratio(w @ a["tokens"], w @ a["wall_s"])}
    for (s, tk, arm), r in per.items():
        base = per.get((s, tk, ar_arm))
        if base is not None:
            r["speedup"] = _ratio(r["tokens_per_s"], base["tokens_per_s"])
    summary: dict = {}
    for tk in sorted({tk for _, tk, _ in per}):
        for arm in sorted({a for _, t2, a in per if t2 == tk}):
            rows = [r for (s, t2, a), r in per.items() if t2 == tk and a == arm]
            summary[(tk, arm)] = {m: _nanmean([r[m] for r in rows if m in r]) for m in ("tau", "tokens_per_s", "speedup")
                                  if any(m in r for r in rows)}
    return {"per_suite": per, "summary": summary}


def _nanmean(xs: list[np.ndarray]) -> np.ndarray:
    """Mean over suites: the point estimate (row 0) skips suites without a value, like `metrics.summary`; a
    resample (rows 1..B) is NaN when any suite's is (a suite with a single prompt has no interval)."""
    x = np.vstack(xs)  # [suites, 1 + B]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # no suite has a value: NaN
        point = np.nanmean(x[:, :1], axis=0)
    return np.concatenate([point, x[:, 1:].mean(axis=0)])


def resolve_pair(pair: list[str], tk: str, summary: dict, ar_arm: str = "ar") -> tuple[str, str] | None:
    """(a, b) with `best` replaced by the arm of highest mean speedup at `tk`; None when an arm did not run."""
    arms = {a for t2, a in summary if t2 == tk}
    out = []
    for i, name in enumerate(pair):
        if name == BEST:
            other = pair[1 - i]
            cands = [(summary[(tk, a)].get("speedup", np.full(1, np.nan))[0], a) for a in arms if a not in (other, ar_arm)]
            cands = [c for c in cands if np.isfinite(c[0])]
            if not cands:
                return None
            name = max(cands)[1]
        if name not in arms:
            return None
        out.append(name)
    return (out[0], out[1]) if out[0] != out[1] else None


def pair_rows(pairs: list[list[str]], rep: dict, level: float, ar_arm: str = "ar") -> list[dict]:
    """Paired differences of the configured arm pairs, per temperature."""
    rows = []
    per, summary = rep["per_suite"], rep["summary"]
    for tk in sorted({tk for tk, _ in summary}):
        for pair in pairs:
            ab = resolve_pair(pair, tk, summary, ar_arm)
            if ab is None:
                continue
            a, b = ab
            dtau = summary[(tk, a)]["tau"] - summary[(tk, b)]["tau"]
            ratios = [_ratio(r["tokens_per_s"], per[(s, tk, b)]["tokens_per_s"])
                      for (s, t2, arm), r in per.items() if t2 == tk and arm == a and (s, tk, b) in per]
            ratio = _nanmean(ratios) if ratios else np.full_like(dtau, np.nan)
            row = {"pair": f"{pair[0]} vs {pair[1]}", "a": a, "b": b, "temperature": tk,
                   "tau_diff": _round(dtau[0]), "tau_diff_ci": _interval(dtau[1:], level),
                   "tokens_per_s_ratio": _round(ratio[0]), "tokens_per_s_ratio_ci": _interval(ratio[1:], level)}
            row["tau_exceeds_noise"] = _excludes(row["tau_diff_ci"], 0.0)
            row["speed_exceeds_noise"] = _excludes(row["tokens_per_s_ratio_ci"], 1.0)
            rows.append(row)
    return rows


def _round(x) -> float | None:
    return None if x is None or not np.isfinite(x) else round(float(x), 6)


def _excludes(ci: list[float] | None, value: float) -> bool | None:
    return None if ci is None else bool(ci[0] > value or ci[1] < value)


def add_intervals(detail: dict, runs: list[BatchRun], n_boot: int, level: float = 0.95, seed: int = 0,
                  pairs: list[list[str]] | None = None, ar_arm: str = "ar") -> dict:
    """Add to `detail` (draftlab.bench.metrics.compute's output), in place:
    suites[s][t][arm]["ci"] = {tau, tokens_per_s, speedup: [lo, hi]} and ["per_prompt"];
    summary[arm][f"{metric}_{t}_ci"] = [lo, hi]; detail["pairs"] (paired differences); detail["uncertainty"]
    (how the intervals were made)."""
    units = collect_units(runs)
    for (s, tk, arm), u in units.items():
        m = detail["suites"].get(s, {}).get(tk, {}).get(arm)
        if m is not None:
            m["per_prompt"] = per_prompt(u)
    detail["uncertainty"] = {"method": "percentile bootstrap over prompts (batches), stratified by suite, paired "
                                       "across arms", "level": level, "resamples": n_boot, "seed": seed,
                             "units_per_suite": {s: len(u.tokens) for (s, _, _), u in units.items()},
                             "best": "the arm with the highest mean speedup at that temperature (chosen on the same "
                                     "data: its interval is optimistic)"}
    if n_boot <= 0:
        detail["pairs"] = []
        return detail
    rep = replicates(units, n_boot, seed, ar_arm)
    for (s, tk, arm), r in rep["per_suite"].items():
        m = detail["suites"][s][tk][arm]
        m["ci"] = {k: _interval(v[1:], level) for k, v in r.items()}
    for (tk, arm), r in rep["summary"].items():
        e = detail["summary"].setdefault(arm, {})
        for k, v in r.items():
            e[f"{k}_{tk}_ci"] = _interval(v[1:], level)
    detail["pairs"] = pair_rows(pairs or [], rep, level, ar_arm)
    return detail


# ---------------------------------------------------------------- sizing
def z_value(level: float) -> float:
    """Two-sided standard-normal quantile (0.95 -> 1.96)."""
    from statistics import NormalDist

    return NormalDist().inv_cdf(0.5 + level / 2)


def prompts_for_halfwidth(sd_by_suite: dict[str, float], halfwidth: float, level: float = 0.95) -> int:
    """Prompts per suite (the same n in every suite) so the interval on the mean over suites of τ has
    half-width ≤ `halfwidth`: z·sqrt(Σ_s sd_s²/n)/S ≤ h  ⇔  n ≥ z²·Σ_s sd_s² / (S²·h²)."""
    if halfwidth <= 0:
        raise ValueError("halfwidth must be > 0")
    sds = [float(v) for v in sd_by_suite.values() if v is not None and np.isfinite(v)]
    if not sds:
        raise ValueError("no per-prompt standard deviation to size from")
    S = len(sds)
    return max(2, math.ceil(z_value(level) ** 2 * sum(v * v for v in sds) / (S * S * halfwidth * halfwidth)))


def halfwidth_for(sd_by_suite: dict[str, float], n: int, level: float = 0.95) -> float:
    """The normal-approximation half-width on the mean over suites of τ with n prompts per suite."""
    sds = [float(v) for v in sd_by_suite.values() if v is not None and np.isfinite(v)]
    return z_value(level) * math.sqrt(sum(v * v for v in sds) / n) / len(sds)


def sizing_plan(detail: dict, halfwidth: float = 0.03, level: float = 0.95, sd: float | None = None,
                safety: float = 1.0) -> dict:
    """How many prompts per suite the benchmark needs so every speculative arm's interval on τ (mean over
    suites, per temperature) is ±`halfwidth`, and what that costs, from a pilot's detail (results/benchmark.json).

    - spread: the pilot's per-prompt τ standard deviation per suite (`per_prompt`), × `safety`; or `sd` for
      every suite when given (e.g. a guess for a drafter not trained yet);
    - cost: seconds per prompt of each arm at each temperature (wall time of its batches ÷ prompts, prefill
      included), and the teacher-forced τ pass per prompt (setup.timing_s.simulated); the concurrency sweep
      does not depend on the number of prompts and is reported apart.
    Returns {per_arm: {arm: {tk: {sd_by_suite, n}}, minutes_per_prompt}, prompts_per_suite, minutes, ...}."""
    suites = detail.get("suites") or {}
    names = sorted(suites)
    per_arm: dict = {}
    need = []
    for arm in sorted({a for temps in suites.values() for by in temps.values() for a in by}):
        e: dict = {"seconds_per_prompt": {}}
        for tk in sorted({tk for temps in suites.values() for tk in temps}):
            ms = {s: suites[s].get(tk, {}).get(arm) for s in names}
            ms = {s: m for s, m in ms.items() if m}
            if not ms:
                continue
            e["seconds_per_prompt"][tk] = float(np.mean([m["wall_s"] / max(m.get("requests") or 1, 1) for m in ms.values()]))
            if "accept_curve" not in next(iter(ms.values())):  # AR: τ = 1, nothing to size
                continue
            if sd is not None:
                sds = {s: sd for s in ms}
            else:
                sds = {s: _sd((m.get("per_prompt") or {}).get("tau")) for s, m in ms.items()}
                if any(v is None for v in sds.values()):
                    continue
            sds = {s: v * safety for s, v in sds.items()}
            n = prompts_for_halfwidth(sds, halfwidth, level)
            e[tk] = {"sd_by_suite": {s: round(v, 4) for s, v in sds.items()}, "prompts_per_suite": n}
            need.append(n)
        e["minutes_per_prompt"] = sum(e["seconds_per_prompt"].values()) / 60  # all temperatures of one prompt
        per_arm[arm] = e
    setup = detail.get("setup") or {}
    prompts_run = sum((setup.get("prompts") or {}).values()) or None
    sim = (setup.get("timing_s") or {}).get("simulated")
    sim_per_prompt = sim / prompts_run / 60 if sim and prompts_run else 0.0
    per_prompt_all = sum(e["minutes_per_prompt"] for e in per_arm.values()) + sim_per_prompt  # one prompt, one suite
    n = max(need) if need else None
    pairs = {}
    for p in detail.get("pairs") or []:  # a paired difference needs far fewer prompts: shared difficulty cancels
        tk, a, b = p["temperature"], p["a"], p["b"]
        diffs = {}
        for s in names:
            pa = ((suites[s].get(tk) or {}).get(a) or {}).get("per_prompt") or {}
            pb = ((suites[s].get(tk) or {}).get(b) or {}).get("per_prompt") or {}
            if pa.get("tau") and pb.get("tau") and len(pa["tau"]) == len(pb["tau"]):
                diffs[s] = _sd([x - y for x, y in zip(pa["tau"], pb["tau"]) if x is not None and y is not None])
        if diffs and all(v is not None for v in diffs.values()):
            sds = {s: max(v, 1e-9) * safety for s, v in diffs.items()}
            pairs[f"{a} vs {b} ({tk})"] = {"sd_by_suite": {s: round(v, 4) for s, v in sds.items()},
                                           "prompts_per_suite": prompts_for_halfwidth(sds, halfwidth, level)}
    return {"halfwidth": halfwidth, "level": level, "safety": safety, "sd": sd, "suites": names, "per_arm": per_arm,
            "simulated_minutes_per_prompt": sim_per_prompt, "minutes_per_prompt_all_arms": per_prompt_all,
            "prompts_per_suite": n, "pairs": pairs,
            "minutes": None if n is None else n * len(names) * per_prompt_all,
            "sweep_minutes": ((setup.get("timing_s") or {}).get("sweep") or 0.0) / 60}


def _sd(values) -> float | None:
    v = [x for x in (values or []) if x is not None]
    return float(np.std(v, ddof=1)) if len(v) >= 2 else None
