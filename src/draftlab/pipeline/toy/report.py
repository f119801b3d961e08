"""The toy world's verdicts (docs/toy-world.md "The analysis plan"), read from a finished run's reports.

- `prompt_taus`: each prompt's engine τ (its committed tokens per verify round) from the benchmark's round log
  (`data/benchmark_rounds.parquet`, the headline runs: concurrency = `benchmark.batch_size`). The benchmark's own
  unit is a batch (at batch 8, two per family), too coarse for a family's interval; a prompt is the unit here.
- `family_pairs`: every pair of `benchmark.pairs`, at T=0 and (where both arms sampled) T=1, per task family
  (one benchmark suite per family) and over all families: Δτ = mean over prompts of τ(a) − τ(b), the same prompts on
  both sides (matched by prompt id), with the verdicts' paired interval and sign-flip test (`stats.paired_interval`;
  overall: the families weighed equally, prompts resampled within each); a family with fewer than `min_prompts`
  prompts is descriptive. (The replicated re-read is `draftlab verdicts`, draftlab.verdicts.) The benchmark's own rows (`overall_pairs`: batches as units,
  suites as strata) carry the tokens/s ratios.
- `verdict`: the one rule, `stats.verdict` (a win when the interval lies above 0 — a ratio's above 1 —, a loss when
  below, no effect shown across it; fewer than 10 units descriptive; a zero-width interval degenerate).
- `consistency`: τ ≈ 1 + Σₖ pₖ (pₖ the unconditional acceptance rate of slot k) — the plain drafter's per-slot
  acceptance on held-out blocks (the pretraining report) against its simulated τ and its engine τ.
- `ceilings`: what the world makes computable — a perfect drafter's τ on each family (every round emits a whole
  block: a prompt of n answer tokens takes ⌈n / S⌉ rounds), which at T=0 is also the answer itself used as the
  oracle path; and the top-8 oracles of the corrector stage.
"""
from __future__ import annotations

import math
from statistics import fmean

from draftlab import stats

MIN_PROMPTS = 16  # a family's pair with fewer prompts is descriptive (issue 50: >= 16 prompts per family)


def verdict(ci, null: float = 0.0, units: int | None = None) -> str:
    """The one verdict rule (`draftlab.stats.verdict`) for a row whose unit count is `units` (None: not counted)."""
    if not ci or ci[0] is None or ci[1] is None:
        return "no interval"
    return stats.verdict(ci, units if units is not None else stats.MIN_UNITS, null)


Taus = dict  # (arm, temperature key, suite) -> {prompt id: engine τ}


def prompt_taus(rounds, batch_size: int) -> Taus:
    """Each prompt's engine τ from the round log (module doc): Σ (accepted + 1) / rounds, per arm, T and suite."""
    df = rounds[rounds.concurrency == batch_size]
    out: Taus = {}
    for (arm, temp, suite, pid), g in df.groupby(["arm", "temperature", "suite", "prompt_id"]):
        key = (arm, "t0" if float(temp) == 0.0 else "t1", suite)
        out.setdefault(key, {})[pid] = float((g.accepted + 1).sum()) / len(g)
    return out


def _paired(taus: Taus, a: str, b: str, tk: str, suites: list[str]) -> dict[str, list[tuple[float, float]]]:
    out = {}
    for s in suites:
        ta, tb = taus.get((a, tk, s), {}), taus.get((b, tk, s), {})
        pairs = [(ta[k], tb[k]) for k in sorted(ta) if k in tb]
        if pairs:
            out[s] = pairs
    return out


def family_pair(taus: Taus, a: str, b: str, suites: list[str], tk: str, label: str,
                min_prompts: int = MIN_PROMPTS, n_boot: int = stats.DRAWS) -> dict | None:
    """One pair over `suites` (one family, or all with the families weighed equally; module doc); None when the two
    arms share no prompt there at `tk`. The interval and test are the verdicts' own (`stats.paired_interval`: prompts
    resampled within their family, the same draw for both arms; the stratified sign-flip test)."""
    by = _paired(taus, a, b, tk, suites)
    if not by:
        return None
    diffs = [x - y for ps in by.values() for x, y in ps]
    strata = [s for s, ps in by.items() for _ in ps]
    r = stats.paired_interval(diffs, strata, n=n_boot)
    ci = None if r["ci"] is None else [round(v, 4) for v in r["ci"]]
    n = len(diffs)
    mean = lambda j: fmean(fmean(p[j] for p in ps) for ps in by.values())  # noqa: E731
    few = min(len(ps) for ps in by.values()) < min_prompts
    return {"pair": f"{a} vs {b}", "family": label, "temperature": tk, "prompts": n, "units": {"unit": "prompt", "n": n},
            "tau_a": round(mean(0), 4), "tau_b": round(mean(1), 4), "tau_diff": round(r["estimate"], 4),
            "tau_diff_ci": ci, "p": r["p"], "test": r["test"],
            "verdict": "descriptive" if few else stats.verdict(ci, n)}


def family_pairs(taus: Taus, pairs: list[list[str]], suites: list[str], temperatures=("t0", "t1"),
                 min_prompts: int = MIN_PROMPTS) -> list[dict]:
    rows = []
    for a, b in pairs:
        for tk in temperatures:
            for label, ss in (("all", suites), *((s, [s]) for s in suites)):
                r = family_pair(taus, a, b, ss, tk, label, min_prompts)
                if r is not None:
                    rows.append(r)
    return rows


def overall_pairs(bench: dict) -> list[dict]:
    """The benchmark's own paired rows with their verdicts (Δτ against 0, the tokens/s ratio against 1)."""
    out, batch = [], int((bench.get("config") or {}).get("batch_size") or 1)
    for p in bench.get("pairs") or []:
        out.append({"pair": p["pair"], "temperature": p["temperature"], "ablation": p.get("ablation", False),
                    "prompts": sum((p.get("prompts") or {}).values()), "tau_diff": p.get("tau_diff"),
                    "tau_diff_ci": p.get("tau_diff_ci"), "units": _units(p, batch),
                    "tau_verdict": verdict(p.get("tau_diff_ci"), 0.0, _units(p, batch)["n"]),
                    "tokens_per_s_ratio": p.get("tokens_per_s_ratio"),
                    "tokens_per_s_ratio_ci": p.get("tokens_per_s_ratio_ci"),
                    "speed_verdict": verdict(p.get("tokens_per_s_ratio_ci"), 1.0, _units(p, batch)["n"])})
    return out


def _units(p: dict, batch: int) -> dict:
    """A benchmark pair row's units: its own `units` where it has them, else what a row of before 2026-12-06 counted
    under `prompts` (its units per suite: batches of `benchmark.batch_size` prompts)."""
    if p.get("units"):
        return p["units"]
    return {"unit": "batch" if batch > 1 else "prompt", "n": sum((p.get("prompts") or {}).values())}


def consistency(pretrain: dict, bench: dict, arm: str = "dflash") -> dict:
    """1 + Σₖ pₖ from the plain drafter's held-out per-slot acceptance, beside its simulated and engine τ."""
    per_slot = pretrain.get("sim_tau_per_slot") or []
    s = (bench.get("summary") or {}).get(arm, {})
    return {"one_plus_sum_p": round(1 + sum(per_slot), 4) if per_slot else None,
            "sim_tau": pretrain.get("sim_tau"), "engine_tau_t0": s.get("tau_t0"), "engine_tau_t0_ci": s.get("tau_t0_ci"),
            "per_slot": per_slot}


def ceilings(bench: dict, block_size: int, ar_arm: str = "ar") -> dict:
    """A perfect drafter's τ per family and overall (module doc), from the tokens AR wrote for each prompt at T=0."""
    per = {}
    for suite, by_t in (bench.get("suites") or {}).items():
        pp = (by_t.get("t0") or {}).get(ar_arm, {}).get("per_prompt") or {}
        taus = [n / math.ceil(n / block_size) for n in pp.get("tokens", []) if n]
        if taus:
            per[suite] = round(fmean(taus), 4)
    return {"perfect_drafter_tau": per, "perfect_drafter_tau_overall": round(fmean(per.values()), 4) if per else None,
            "block_size": block_size}


def report(bench: dict, pretrain: dict, corrector: dict | None, specopd: dict | None, block_size: int,
           taus: Taus) -> dict:
    """Everything the analysis plan reads (module doc); `taus` from `prompt_taus`."""
    pairs = [list(p) for p in (bench.get("config") or {}).get("pairs", [])] or [
        p["pair"].split(" vs ") for p in bench.get("pairs") or []]
    pairs = [p for p in pairs if "best" not in p]
    oracle = {}
    for v, r in ((corrector or {}).get("variants") or {}).items():
        oracle[v] = {k: r.get(k) for k in ("sim_tau", "sim_tau_uncorrected", "sim_tau_gain", "sim_tau_oracle",
                                           "sim_tau_oracle_reachable", "headroom_closed", "headroom_closed_reachable")}
    return {"overall_pairs": overall_pairs(bench),
            "family_pairs": family_pairs(taus, pairs, list(bench.get("suites") or {})),
            "consistency": consistency(pretrain, bench), "ceilings": ceilings(bench, block_size),
            "corrector_oracles": oracle,
            "specopd": {k: (specopd or {}).get(k) for k in ("specopd", "baselines")}}
