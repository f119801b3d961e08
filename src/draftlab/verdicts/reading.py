"""Every comparison of a run or of a world's replicates, read from per-prompt records with one unit per figure.

- τ: the unit is a prompt. An arm's τ is the mean over suites of the mean per-prompt τ (the benchmark's summary
  formula; AR's is 1); its interval resamples prompts within their suite. A pair's Δτ = τ(a) − τ(b) is paired per
  prompt (the prompts both arms decoded), with the stratified bootstrap interval and the sign-flip test
  (`draftlab.stats.paired_interval`); over replicates, the runs × prompts matrix with the two-way random-effects
  interval (`stats.crossed_interval`).
- speed: over the mix, total tokens ÷ total seconds against the other arm's on the same prompts, the geometric mean
  of the per-suite ratios and every per-suite ratio beside it (`stats.ratio_interval`); the unit is what is
  independent in the timing — a lockstep batch (its seconds are shared by its prompts), a prompt at one stream.
- every figure carries {unit, n}; the one verdict rule (`stats.verdict`): fewer than `min_units` units is
  descriptive, a zero-width interval degenerate; a plan's primary pairs are read with Holm's adjusted p at its
  alpha ("win (Holm)", "loss (Holm)", else "nominal only" when the unadjusted interval excludes 0, else "no effect
  shown"); secondary pairs are descriptive."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from draftlab import stats
from draftlab.errors import DraftlabError

AR = "ar"
PAIR_SAMPLES = ("headline", "extra")  # a pair reads the headline prompts and a pair's extra prompts (the benchmark's)


def _rows(df: pd.DataFrame, arm: str, t: float, samples=("headline",)) -> pd.DataFrame:
    return df[(df.arm == arm) & (df.temperature == t) & df["sample"].isin(samples)]


def taus(df: pd.DataFrame, arm: str, t: float, samples=("headline",)) -> pd.Series:
    """Per-prompt τ indexed by (suite, prompt id); AR's rows (no rounds of its own) are 1."""
    r = _rows(df, arm, t, samples)
    tau = r["tau"].astype(float)
    if arm == AR:
        tau = tau.fillna(1.0)
    return pd.Series(tau.to_numpy(), index=pd.MultiIndex.from_arrays([r.suite, r.prompt_id]))


def timing_units(df: pd.DataFrame, arm: str, t: float, samples=("headline",), streams: int | None = None) -> pd.DataFrame:
    """One row per timing unit of an arm (a lockstep batch: its tokens and shared seconds), indexed by (suite, the
    unit's prompt ids): the same key is the same prompts for every arm."""
    r = _rows(df, arm, t, samples)
    if streams is not None:
        r = r[r.streams == streams]
    if r.empty:
        return pd.DataFrame(columns=["tokens", "seconds", "prompts", "rounds", "steps"])
    if "rounds" not in r:
        r = r.assign(rounds=float("nan"))  # records written before rounds were
    g = r.groupby(["suite", "sample", "streams", "batch"], sort=True)
    out = g.agg(tokens=("batch_tokens", "first"), seconds=("batch_wall_s", "first"),
                key=("prompt_id", lambda s: ",".join(sorted(map(str, s)))), prompts=("prompt_id", "size"),
                rounds=("rounds", "max"),  # a lockstep batch runs as many rounds as its longest stream
                steps=("tokens", "max"))  # ... and an AR batch (no rounds recorded) one step per token of it
    out = out.reset_index()
    return out.set_index(["suite", "key"])[["tokens", "seconds", "prompts", "rounds", "steps"]]


def unit_of(units: pd.DataFrame) -> dict:
    return {"unit": "prompt" if len(units) and (units.prompts == 1).all() else "batch", "n": int(len(units))}


def arm_row(df: pd.DataFrame, arm: str, t: float, min_units: int = stats.MIN_UNITS) -> dict:
    """One arm at one temperature: τ with its interval over prompts, tokens/s over the mix and its ratio to AR on
    the same prompts (total time; geometric mean and per-suite ratios beside it)."""
    tau = taus(df, arm, t)
    if tau.empty:
        raise DraftlabError(f"no per-prompt records of arm {arm} at T={t:g}")
    row = {"arm": arm, "temperature": t, "prompts": int(len(tau))}
    if arm == AR or tau.isna().all():
        row["tau"] = 1.0 if arm == AR else None
    else:
        m = stats.mean_interval(tau.to_numpy(), tau.index.get_level_values(0))
        row.update(tau=m["estimate"], tau_ci=m["ci"], tau_units={"unit": "prompt", "n": m["n"]})
    units = timing_units(df, arm, t)
    row["tokens_per_s"] = float(units.tokens.sum() / units.seconds.sum()) if len(units) else None
    # what a round costs in absolute time (AR: a step), so that no ratio hides a slow baseline
    rounds = units.rounds.sum(min_count=1) if len(units) else float("nan")
    if arm == AR and not rounds > 0:
        rounds = units.steps.sum()  # the AR arm records no rounds: one step per token
    row["ms_per_round"] = float(1e3 * units.seconds.sum() / rounds) if rounds == rounds and rounds > 0 else None
    if arm != AR:
        sp = speed(df, arm, AR, t, samples=("headline",))
        row.update({f"speedup{k}": v for k, v in sp.items() if k in ("", "_ci", "_geomean", "_per_suite", "_units",
                                                                   "_verdict")})
    return row


def speed(df: pd.DataFrame, a: str, b: str, t: float, samples=PAIR_SAMPLES, streams: int | None = None,
          min_units: int = stats.MIN_UNITS) -> dict:
    """Arm a's tokens/s over arm b's on the timing units both decoded (total tokens / total seconds of each)."""
    ua, ub = timing_units(df, a, t, samples, streams), timing_units(df, b, t, samples, streams)
    common = [k for k in ua.index if k in ub.index]
    if not common:
        return {"": None}
    ua, ub = ua.loc[common], ub.loc[common]
    r = stats.ratio_interval(ua.tokens, ua.seconds, ub.tokens, ub.seconds, [k[0] for k in common])
    units = unit_of(ua)
    return {"": r["estimate"], "_ci": r["ci"], "_geomean": r["geomean"], "_per_suite": r["per_stratum"],
            "_units": units, "_verdict": stats.verdict(r["ci"], units["n"], 1.0, min_units)}


def paired(df: pd.DataFrame, a: str, b: str, t: float) -> tuple[np.ndarray, list[str], list[tuple]]:
    """(Δτ per prompt, its suites, the (suite, prompt) keys) on the prompts both arms decoded at `t`."""
    ta, tb = taus(df, a, t, PAIR_SAMPLES), taus(df, b, t, PAIR_SAMPLES)
    ta, tb = ta[~ta.index.duplicated()], tb[~tb.index.duplicated()]
    keys = [k for k in ta.index if k in tb.index and not (math.isnan(ta[k]) or math.isnan(tb[k]))]
    d = np.asarray([ta[k] - tb[k] for k in keys], dtype=float)
    return d, [k[0] for k in keys], keys


def pair_row(df: pd.DataFrame, a: str, b: str, t: float, min_units: int = stats.MIN_UNITS) -> dict:
    """One pair in one run: Δτ paired per prompt (interval, sign-flip p) and the speed ratio a ÷ b."""
    d, strata, _ = paired(df, a, b, t)
    row = {"pair": f"{a} vs {b}", "a": a, "b": b, "temperature": t}
    if len(d) == 0:  # an arm without τ of its own (a Hugging Face row): its speed still compares
        sp = {f"speed{k}": v for k, v in speed(df, a, b, t).items()}
        return {**row, "tau_diff": None, "verdict": "τ not measured" if sp.get("speed") is not None else "not run",
                **sp}
    r = stats.paired_interval(d, strata)
    units = {"unit": "prompt", "n": r["n"]}
    row.update(tau_diff=r["estimate"], tau_diff_ci=r["ci"], p=r["p"], test=r["test"], tau_units=units,
               verdict=stats.verdict(r["ci"], units["n"], 0.0, min_units))
    row.update({f"speed{k}": v for k, v in speed(df, a, b, t).items()})
    return row


def holm_column(rows: list[dict], alpha: float) -> None:
    """In place on the primary rows: Holm's adjusted p and the verdict it gives (module doc)."""
    adj = stats.holm([r.get("p") for r in rows])
    for r, p in zip(rows, adj):
        r["p_holm"] = p
        base = r.get("verdict")
        if base in ("win", "loss"):
            r["verdict_holm"] = f"{base} (Holm)" if p is not None and p < alpha else "nominal only"
        else:
            r["verdict_holm"] = base


def read_run(df: pd.DataFrame, arms: list[str], pairs: list[tuple[str, str, float]], min_units: int = stats.MIN_UNITS,
             primary: list[tuple[str, str, float]] = (), alpha: float = 0.05) -> dict:
    """A single run's arm table per temperature and its pairs (the primary ones with Holm, when a plan names them)."""
    temps = sorted(set(df.temperature[df["sample"] == "headline"]))
    table = {t: [arm_row(df, arm, t, min_units) for arm in arms if not _rows(df, arm, t).empty] for t in temps}
    rows = [pair_row(df, a, b, t, min_units) for a, b, t in pairs]
    prim = [r for r in rows if (r["a"], r["b"], r["temperature"]) in set(primary)]
    if prim:
        holm_column(prim, alpha)
    for r in rows:
        r["family"] = "primary" if r in prim else "secondary"
    return {"arms": table, "pairs": rows}


# ---------------------------------------------------------------------------------------------- replicates


def crossed_pair(frames: list[pd.DataFrame], a: str, b: str, t: float, min_units: int = stats.MIN_UNITS) -> dict:
    """One pair over replicates: the runs × prompts matrix of per-prompt Δτ (the prompts every run decoded for both
    arms), the two-way interval and t test, each run's own estimate, and the speed ratio pooled over runs."""
    per = [paired(df, a, b, t) for df in frames]
    common = set(per[0][2])
    for _, _, keys in per[1:]:
        common &= set(keys)
    keys = sorted(common)
    if not keys:
        return {"pair": f"{a} vs {b}", "a": a, "b": b, "temperature": t, "tau_diff": None, "verdict": "not run"}
    D = np.vstack([[dict(zip(k, d))[key] for key in keys] for d, _, k in per])
    strata = [k[0] for k in keys]
    c = stats.crossed_interval(D, strata)
    units = {"unit": "prompt x run", "n": len(keys), "runs": len(frames)}
    row = {"pair": f"{a} vs {b}", "a": a, "b": b, "temperature": t, "tau_diff": c["estimate"], "tau_diff_ci": c["ci"],
           "p": c["p"], "test": c["test"], "se": c["se"], "df": c["df"], "tau_units": units,
           "per_run": c["per_run"], "run_sd": c.get("run_sd"), "prompt_sd": c.get("prompt_sd"),
           "resid_sd": c.get("resid_sd"), "resolvable": c.get("resolvable"), "mde80": c.get("mde80"),
           "verdict": stats.verdict(c["ci"], len(keys), 0.0, min_units) if len(frames) >= 2 else "descriptive"}
    row.update({f"speed{k}": v for k, v in pooled_speed(frames, a, b, t).items()})
    return row


def pooled_speed(frames: list[pd.DataFrame], a: str, b: str, t: float, samples=PAIR_SAMPLES,
                 streams: int | None = None) -> dict:
    """a ÷ b speed over every run's timing units together (total tokens / total seconds), the runs' own ratios and
    per-suite ratios beside it; descriptive (a timing unit's noise is not a training run's)."""
    parts, runs = [], []
    for i, df in enumerate(frames):
        ua, ub = timing_units(df, a, t, samples, streams), timing_units(df, b, t, samples, streams)
        common = [k for k in ua.index if k in ub.index]
        if not common:
            continue
        ua, ub = ua.loc[common], ub.loc[common]
        runs.append(float((ua.tokens.sum() / ua.seconds.sum()) / (ub.tokens.sum() / ub.seconds.sum())))
        parts.append(pd.DataFrame({"suite": [k[0] for k in common], "ta": ua.tokens.to_numpy(),
                                   "sa": ua.seconds.to_numpy(), "tb": ub.tokens.to_numpy(), "sb": ub.seconds.to_numpy(),
                                   "prompts": ua.prompts.to_numpy()}))
    if not parts:
        return {"": None}
    u = pd.concat(parts)
    r = stats.ratio_interval(u.ta, u.sa, u.tb, u.sb, list(u.suite))
    unit = "prompt" if (u.prompts == 1).all() else "batch"
    return {"": r["estimate"], "_geomean": r["geomean"], "_per_suite": r["per_stratum"], "_per_run": runs,
            "_units": {"unit": f"{unit} x run", "n": max(len(p) for p in parts), "total": int(len(u)), "runs": len(runs)},
            "_verdict": "descriptive"}  # n: a run's units (the most any run timed), total: over the runs


def read_replicates(frames: list[pd.DataFrame], plan, base_arm: str = "dflash") -> dict:
    """Every pair of the plan over the replicates (primary with Holm), the base drafter's τ per run and its spread,
    and what the design resolves."""
    prim = [crossed_pair(frames, a, b, t, plan.min_units) for a, b, t in plan.primary]
    holm_column([r for r in prim if r.get("p") is not None], plan.alpha)
    sec = [crossed_pair(frames, a, b, t, plan.min_units) for a, b, t in plan.secondary]
    for r in prim:
        r["family"] = "primary"
    for r in sec:
        r["family"] = "secondary"
        r["verdict_holm"] = "descriptive"
    # the base drafter at T=0, or at the lowest temperature the plan reads it (an addition read at T=1 only)
    bt = 0.0 if not plan.pairs else min((t for a, b, t in plan.pairs if base_arm in (a, b)), default=0.0)
    base = [arm_row(df, base_arm, bt) for df in frames]
    taus_ = [r["tau"] for r in base]
    resolvable = [r["resolvable"] for r in prim if r.get("resolvable") is not None]
    return {"primary": prim, "secondary": sec,
            "base": {"arm": base_arm, "temperature": bt, "tau_per_run": taus_, "sd": float(np.std(taus_, ddof=1)) if len(taus_) > 1 else None,
                     "range": [min(taus_), max(taus_)], "units": {"unit": "run", "n": len(taus_)}},
            "resolution": {"median_resolvable_tau_diff": float(np.median(resolvable)) if resolvable else None,
                           "range": [min(resolvable), max(resolvable)] if resolvable else None,
                           "what": "the smallest |Δτ| whose 95% interval excludes 0 at each primary pair's observed "
                                   "spread (t quantile x its standard error)"}}
