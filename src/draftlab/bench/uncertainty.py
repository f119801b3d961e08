"""Uncertainty of the benchmark's numbers: bootstrap confidence intervals over prompts, paired across
arms (the sample-size rules that read them: draftlab.measure.sizing).

- Unit of resampling: one batch of the per-suite runs, which is one prompt at the default
  `benchmark.batch_size: 1`. Every arm decodes the same batches (draftlab.bench.runner), so one
  bootstrap replicate draws one multiset of batch indices per suite and applies it to every arm and
  temperature on the same prompts (`Weights`): a speedup (arm tokens/s ÷ AR tokens/s), a Δτ or a tokens/s
  ratio of two arms is *paired* — the prompt-to-prompt variation both arms share cancels. An arm that
  decoded fewer prompts (an ablation arm, the T>0 arms) is compared on its prompts only, with its own draw.
- Suites are strata: prompts are resampled within their suite, and a replicate's summary is the summary's own
  formula (`draftlab.bench.metrics.summary`): τ the mean over suites; tokens/s and the speedup over the mix as total
  tokens / total seconds (against AR's on the same prompts), with the geometric mean of the per-suite speedups beside
  it — never an arithmetic mean of ratios. A suite with a single prompt has no
  interval (nor has any summary or pair that includes it): one prompt says nothing about the spread.
- Per unit: τ as the sum of per-request τ and the count of requests that had a round (the estimator of
  `group_metrics`: per request, then averaged), tokens and wall seconds (aggregate tokens/s =
  Σ tokens / Σ seconds), and the copy / loop reading (draftlab.bench.copying). The point estimates are
  `compute()`'s; the intervals are percentile intervals.
- Units: every interval names what it resampled and how many (`units`: {unit: prompt | batch, n}); a lockstep
  batch of several prompts is one unit, not several. Each pair row's `tau_verdict` / `speed_verdict` is the one rule
  (`draftlab.stats.verdict`): fewer than 10 units is descriptive, a zero-width interval degenerate.
- Pairs (`benchmark.pairs`): Δτ = τ_a − τ_b and the tokens/s ratio a ÷ b (total tokens / total seconds of each
  over the suites, the geometric mean of the per-suite ratios beside it), each with its own paired interval and
  half-width, on the prompts both arms decoded,
  and again (`no_loop`) without the prompts where either answer looped (those pooled over suites into one
  stratum: few prompts per suite are left); `exceeds_noise` says whether the
  interval excludes 0 (Δτ) or 1 (ratio); `ablation` whether an arm of the pair is an ablation arm. The
  name `best` stands for the headline arm with the highest mean speedup at that temperature (other than
  the pair's other arm and AR) — chosen on the same data, so its interval is optimistic.
"""
from __future__ import annotations

import warnings
import zlib
from typing import Collection

import numpy as np

from draftlab.bench.copying import LOOP_SPAN
from draftlab.bench.metrics import summary_headroom
from draftlab.bench.runner import BatchRun
# the unit of resampling, re-exported: this module is the intervals' face
from draftlab.bench.units import Units, collect_units, per_prompt  # noqa: F401
from draftlab.stats import percentile_interval, verdict

BEST = "best"


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def replicates(units: dict[tuple[str, str, str], Units], n_boot: int, seed: int = 0, ar_arm: str = "ar",
               weights: "Weights | None" = None) -> dict:
    """Bootstrap replicates [B] of τ, tokens/s and speedup per (suite, temperature key, arm), and their means
    over suites per (temperature key, arm). Row 0 of every weight matrix is all ones (the point estimate);
    an arm on fewer prompts (ablation, T>0 subset) has its speedup against AR on those prompts."""
    weights = weights or Weights(n_boot, seed)
    per: dict = {}
    for (s, tk, arm), u in units.items():
        w = weights.get(s, u.keys())
        per[(s, tk, arm)] = _stats(u, np.arange(len(u.tokens)), w)
        base = units.get((s, tk, ar_arm))
        if base is not None and arm != ar_arm:  # AR on this arm's prompts, resampled with the same weights
            idx = _match(base.keys(), u.keys())
            if idx is not None:
                b = _stats(base, idx, w)
                per[(s, tk, arm)].update(speedup=_ratio(per[(s, tk, arm)]["tokens_per_s"], b["tokens_per_s"]),
                                         ar_tokens=b["tokens"], ar_wall_s=b["wall_s"])
    for (s, tk, arm), r in per.items():
        if arm == ar_arm:
            r.update(speedup=_ratio(r["tokens_per_s"], r["tokens_per_s"]), ar_tokens=r["tokens"], ar_wall_s=r["wall_s"])
    summary: dict = {}
    for tk in sorted({tk for _, tk, _ in per}):
        for arm in sorted({a for _, t2, a in per if t2 == tk}):
            rows = [r for (s, t2, a), r in per.items() if t2 == tk and a == arm]
            summary[(tk, arm)] = {"tau": _nanmean([r["tau"] for r in rows]), **_speed(rows)}
    return {"per_suite": per, "summary": summary}


def _speed(rows: list[dict]) -> dict:
    """Speed over a mix of suites from per-suite replicate rows: tokens/s = Σ tokens / Σ seconds, the speedup =
    that over AR's Σ tokens / Σ seconds on the same prompts, and the geometric mean of the per-suite speedups beside
    it (draftlab.bench.metrics.total_speedup: the point estimate's formula). A row without AR on its prompts leaves
    the speedup out."""
    tok, wall = sum(r["tokens"] for r in rows), sum(r["wall_s"] for r in rows)
    out = {"tokens_per_s": _ratio(tok, wall)}
    if all("ar_tokens" in r for r in rows):
        out["speedup"] = _ratio(out["tokens_per_s"], _ratio(sum(r["ar_tokens"] for r in rows),
                                                            sum(r["ar_wall_s"] for r in rows)))
        with np.errstate(invalid="ignore", divide="ignore"):
            out["speedup_geomean"] = np.exp(np.mean(np.log(np.vstack([r["speedup"] for r in rows])), axis=0))
    return out


class Weights:
    """Bootstrap weight matrices [1 + B, U] per (suite, the units' keys): every group of units with the same
    prompts (arms on the same sample) shares one draw, so differences between them are paired; a subsample
    (ablation arms, T>0 arms, the prompts without loops) gets its own draw, seeded from its keys. Row 0 is all
    ones (the point estimate); a single unit gets NaN resamples (one prompt says nothing about the spread)."""

    def __init__(self, n_boot: int, seed: int = 0):
        self.n_boot, self.seed, self.cache = n_boot, seed, {}

    def get(self, suite: str, keys: list[str]) -> np.ndarray:
        k = (suite, tuple(keys))
        if k not in self.cache:
            n = len(keys)
            rng = np.random.default_rng([self.seed, zlib.crc32("|".join(k[:1] + k[1]).encode())])
            w = rng.multinomial(n, np.full(n, 1.0 / n), size=self.n_boot).astype(float) if n else np.zeros((self.n_boot, 0))
            if n < 2:
                w[:] = np.nan
            self.cache[k] = np.vstack([np.ones((1, n)), w])  # [1 + B, U]
        return self.cache[k]


def _match(keys: list[str], wanted: list[str]) -> np.ndarray | None:
    """Indices into `keys` of the `wanted` keys, in their order; None when one is missing."""
    pos = {k: i for i, k in enumerate(keys)}
    return np.asarray([pos[k] for k in wanted]) if all(k in pos for k in wanted) else None


def _stats(u: Units, idx: np.ndarray, w: np.ndarray) -> dict[str, np.ndarray]:
    """Replicates [1 + B] of τ and tokens/s over the units `idx` of `u` under weights w [1 + B, len(idx)]."""
    a = {k: v[idx] for k, v in u.arrays().items()}
    tau = _ratio(w @ a["tau_sum"], w @ a["tau_n"])
    if not np.isfinite(tau).any():  # AR: τ = 1 by definition
        tau = np.ones(w.shape[0])
    tokens, wall = w @ a["tokens"], w @ a["wall_s"]
    return {"tau": tau, "tokens_per_s": _ratio(tokens, wall), "tokens": tokens, "wall_s": wall}


def _nanmean(xs: list[np.ndarray]) -> np.ndarray:
    """Mean over suites: the point estimate (row 0) skips suites without a value, like `metrics.summary`; a
    resample (rows 1..B) is NaN when any suite's is (a suite with a single prompt has no interval)."""
    x = np.vstack(xs)  # [suites, 1 + B]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # no suite has a value: NaN
        point = np.nanmean(x[:, :1], axis=0)
    return np.concatenate([point, x[:, 1:].mean(axis=0)])


def resolve_pair(pair: list[str], tk: str, summary: dict, ar_arm: str = "ar",
                 ablation: Collection[str] = ()) -> tuple[str, str] | None:
    """(a, b) with `best` replaced by the headline arm of highest mean speedup at `tk`; None when an arm did not
    run at `tk`."""
    arms = {a for t2, a in summary if t2 == tk}
    out = []
    for i, name in enumerate(pair):
        if name == BEST:
            other = pair[1 - i]
            cands = [(summary[(tk, a)].get("speedup", np.full(1, np.nan))[0], a) for a in arms
                     if a not in (other, ar_arm) and a not in ablation]
            cands = [c for c in cands if np.isfinite(c[0])]
            if not cands:
                return None
            name = max(cands)[1]
        if name not in arms:
            return None
        out.append(name)
    return (out[0], out[1]) if out[0] != out[1] else None


def pair_stats(units: dict, a: str, b: str, tk: str, weights: Weights, drop_loops: bool = False,
               ar_arm: str = "ar") -> dict:
    """Replicates [1 + B] of Δτ (a − b) and the tokens/s ratio (a ÷ b) on the prompts both arms decoded, and the
    prompts used per suite. Δτ is NaN when an arm other than AR has no rounds of its own (the Hugging Face rows:
    their τ is not measured).

    All prompts: means over suites of the per-suite values (suites are strata; a suite left with no prompt is
    left out of the mean). With `drop_loops` (the prompts where neither answer looped) the prompts of all suites
    are *pooled* into one stratum: after dropping the loops a suite often keeps 0 or 1 prompts (which have no
    interval of their own), and a suite with one such prompt should not weigh as much as one with several."""
    dtau, ratio, counts, unit_keys = [], [], {}, []
    pooled: tuple[Units, Units] = (Units(), Units())
    unmeasured = False
    for s in sorted({s for s, t, x in units if t == tk and x == a}):
        ua, ub = units[(s, tk, a)], units.get((s, tk, b))
        if ub is None:
            continue
        loop_a, loop_b = dict(zip(ua.keys(), ua.loop)), dict(zip(ub.keys(), ub.loop))
        keys = [k for k in ua.keys() if k in loop_b and not (drop_loops and (loop_a[k] or loop_b[k]))]
        counts[s] = sum(k.count(",") + 1 for k in keys)  # prompts (a unit of a lockstep batch holds several)
        if not keys:
            continue
        um = any(x != ar_arm and not any(u.tau_n) for x, u in ((a, ua), (b, ub)))
        unmeasured = unmeasured or um
        if drop_loops:
            for u, into in ((ua, pooled[0]), (ub, pooled[1])):
                _extend(into, u, _match(u.keys(), keys), s)
            continue
        d, r = _pair(ua, ub, keys, weights.get(s, keys), um)
        dtau.append(d)
        ratio.append(r)
        unit_keys += keys
    if pooled[0].tokens:
        keys = pooled[0].keys()
        d, r = _pair(pooled[0], pooled[1], keys, weights.get("pooled", keys), unmeasured)
        dtau.append(d)
        ratio.append(r)
        unit_keys += keys
    empty = np.full(weights.n_boot + 1, np.nan)
    speed = _speed([{"tokens": r["a_tokens"], "wall_s": r["a_wall_s"], "ar_tokens": r["b_tokens"],
                     "ar_wall_s": r["b_wall_s"], "speedup": r["ratio"]} for r in ratio]) if ratio else {}
    return {"tau_diff": _nanmean(dtau) if dtau else empty, "tokens_per_s_ratio": speed.get("speedup", empty),
            "tokens_per_s_ratio_geomean": speed.get("speedup_geomean", empty), "prompts": counts,
            "units": unit_count(unit_keys), **({"strata": "pooled over suites"} if drop_loops else {})}


def unit_count(keys: list[str]) -> dict:
    """{unit, n}: what an interval resampled — a prompt when every unit is one prompt (batch 1), else a batch of
    several decoded together — and how many (the units' keys: their prompt ids joined by commas)."""
    return {"unit": "batch" if any("," in k for k in keys) else "prompt", "n": len(keys)}


def _pair(ua: Units, ub: Units, keys: list[str], w: np.ndarray, unmeasured: bool) -> tuple[np.ndarray, dict]:
    """Replicates [1 + B] of Δτ, and of the tokens/s ratio with both arms' token and second sums, of two arms'
    units `keys` under one weight matrix."""
    ra, rb = _stats(ua, _match(ua.keys(), keys), w), _stats(ub, _match(ub.keys(), keys), w)
    dtau = np.full(w.shape[0], np.nan) if unmeasured else ra["tau"] - rb["tau"]
    return dtau, {"ratio": _ratio(ra["tokens_per_s"], rb["tokens_per_s"]), "a_tokens": ra["tokens"],
                  "a_wall_s": ra["wall_s"], "b_tokens": rb["tokens"], "b_wall_s": rb["wall_s"]}


def _extend(into: Units, u: Units, idx: np.ndarray, suite: str) -> None:
    """Append units `idx` of `u` to `into` (prompt ids prefixed with their suite, so keys stay unique)."""
    for i in idx:
        into.prompt_ids.append([f"{suite}:{p}" for p in u.prompt_ids[i]])
        for k in ("tokens", "wall_s", "tau_sum", "tau_n", "copy_share", "repeat_share", "loop"):
            getattr(into, k).append(getattr(u, k)[i])


def _verdict(st: dict, level: float) -> dict:
    dtau, ratio = st["tau_diff"], st["tokens_per_s_ratio"]
    row = {"prompts": st["prompts"], **({"strata": st["strata"]} if "strata" in st else {}), "units": st["units"],
           "tau_diff": _round(dtau[0]), "tau_diff_ci": percentile_interval(dtau[1:], level, digits=6),
           "tokens_per_s_ratio": _round(ratio[0]), "tokens_per_s_ratio_ci": percentile_interval(ratio[1:], level, digits=6),
           "tokens_per_s_ratio_geomean": _round(st["tokens_per_s_ratio_geomean"][0])}
    row["tau_exceeds_noise"] = _excludes(row["tau_diff_ci"], 0.0)
    row["speed_exceeds_noise"] = _excludes(row["tokens_per_s_ratio_ci"], 1.0)
    # the one verdict rule (draftlab.stats.verdict): fewer than 10 units is descriptive, a zero-width interval degenerate
    row["tau_verdict"] = verdict(row["tau_diff_ci"], st["units"]["n"])
    row["speed_verdict"] = verdict(row["tokens_per_s_ratio_ci"], st["units"]["n"], 1.0)
    row["tau_diff_halfwidth"] = _halfwidth(row["tau_diff_ci"])
    row["tokens_per_s_ratio_halfwidth"] = _halfwidth(row["tokens_per_s_ratio_ci"])
    return row


def _halfwidth(ci: list[float] | None) -> float | None:
    return None if ci is None else round((ci[1] - ci[0]) / 2, 6)


def pair_rows(pairs: list[list[str]], units: dict, rep: dict, weights: Weights, level: float, ar_arm: str = "ar",
              ablation: Collection[str] = ()) -> list[dict]:
    """Paired differences of the configured arm pairs, per temperature: on the prompts both arms decoded, and
    (`no_loop`) on those where neither answer looped (draftlab.bench.copying). `ablation`: the pair has an
    ablation arm (its size is the ablation sample's)."""
    rows = []
    for tk in sorted({tk for tk, _ in rep["summary"]}):
        for pair in pairs:
            ab = resolve_pair(pair, tk, rep["summary"], ar_arm, ablation)
            if ab is None:
                continue
            a, b = ab
            row = {"pair": f"{pair[0]} vs {pair[1]}", "a": a, "b": b, "temperature": tk,
                   "ablation": a in ablation or b in ablation, **_verdict(pair_stats(units, a, b, tk, weights, ar_arm=ar_arm), level)}
            row["no_loop"] = _verdict(pair_stats(units, a, b, tk, weights, True, ar_arm), level)
            rows.append(row)
    return rows


def _round(x) -> float | None:
    return None if x is None or not np.isfinite(x) else round(float(x), 6)


def _excludes(ci: list[float] | None, value: float) -> bool | None:
    return None if ci is None else bool(ci[0] > value or ci[1] < value)


def add_intervals(detail: dict, runs: list[BatchRun], n_boot: int, level: float = 0.95, seed: int = 0,
                  pairs: list[list[str]] | None = None, ar_arm: str = "ar", ablation: Collection[str] = (),
                  extra: list[BatchRun] = ()) -> dict:
    """Add to `detail` (draftlab.bench.metrics.compute's output), in place:
    suites[s][t][arm]["ci"] = {tau, tokens_per_s, speedup: [lo, hi]} and ["per_prompt"] (with a pair's `extra`
    prompts after the headline ones, marked);
    summary[arm][f"{metric}_{t}_ci"] = [lo, hi]; detail["pairs"] (paired differences); detail["uncertainty"]
    (how the intervals were made). `extra`: the runs on a pair's extra prompts (pair_prompts_per_suite), which
    only the pairs read."""
    units = collect_units(runs)
    with_extra = collect_units([*runs, *extra]) if extra else units  # the pairs' units
    for (s, tk, arm), u in with_extra.items():
        m = detail["suites"].get(s, {}).get(tk, {}).get(arm)
        if m is not None:
            m["per_prompt"] = per_prompt(u, len(units[(s, tk, arm)].tokens) if (s, tk, arm) in units else 0)
    summary_headroom(detail["summary"], detail["suites"])  # now with the headroom's noise (per-prompt oracle τ)
    detail["uncertainty"] = {"method": "percentile bootstrap over prompts (batches), stratified by suite, paired "
                                       "across arms", "level": level, "resamples": n_boot, "seed": seed,
                             "units_per_suite": {s: len(u.tokens) for (s, _, _), u in units.items()},
                             **({"pairs_extra": "pairs in benchmark.pair_prompts_per_suite also use their arms' extra "
                                                "prompts (T=0); every per-arm row and interval is on the headline sample"}
                                if extra else {}),
                             "best": "the headline arm with the highest mean speedup at that temperature (chosen on "
                                     "the same data: its interval is optimistic)",
                             "pairs": "on the prompts both arms decoded; `no_loop`: the same without the prompts where "
                                      f"either answer looped (a {LOOP_SPAN}-token span repeated later in the answer), "
                                      "those prompts pooled over suites into one stratum"}
    if n_boot <= 0:
        detail["pairs"] = []
        return detail
    weights = Weights(n_boot, seed)
    rep = replicates(units, n_boot, seed, ar_arm, weights)
    for (s, tk, arm), r in rep["per_suite"].items():
        m = detail["suites"][s][tk][arm]
        m["ci"] = {k: percentile_interval(r[k][1:], level, digits=6) for k in ("tau", "tokens_per_s", "speedup") if k in r}
        m["ci"]["units"] = unit_count(units[(s, tk, arm)].keys())
    for (tk, arm), r in rep["summary"].items():
        e = detail["summary"].setdefault(arm, {})
        for k, v in r.items():
            e[f"{k}_{tk}_ci"] = percentile_interval(v[1:], level, digits=6)
        e[f"units_{tk}"] = unit_count([k for (s, t2, a), u in units.items() if t2 == tk and a == arm for k in u.keys()])
    detail["pairs"] = pair_rows(pairs or [], with_extra, rep, weights, level, ar_arm, ablation)
    return detail


# the sizing rule reads these intervals' pilots: draftlab.measure.sizing
from draftlab.measure.sizing import (  # noqa: E402,F401  (kept importable from here)
    halfwidth_for, prompts_for_halfwidth, sizing_plan, z_value,
)
