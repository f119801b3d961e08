"""The toy world's verdicts (docs/toy-world.md "The analysis plan"), read from a finished run's reports.

- `family_pairs`: every pair of `benchmark.pairs`, at T=0 and (where both arms sampled) T=1, per task family
  (one benchmark suite per family): Δτ = mean over the family's prompts of τ(a) − τ(b), the same prompts on both
  sides (matched by prompt id), with the paired percentile bootstrap interval over prompts (`stats.bootstrap_interval`);
  a family with fewer than `min_prompts` prompts is marked descriptive. The overall rows are the benchmark's own
  (`results/benchmark.json` → `pairs`: suites as strata, tokens/s ratios beside).
- `verdict`: a win when the interval lies above 0 (a ratio's above 1), a loss when below, else no effect shown.
- `consistency`: τ ≈ 1 + Σₖ pₖ (pₖ the unconditional acceptance rate of slot k) — the plain drafter's per-slot
  acceptance on held-out blocks (the pretraining report) against its simulated τ and its engine τ.
- `ceilings`: what the world makes computable — a perfect drafter's τ on each family (every round emits a whole
  block: a prompt of n answer tokens takes ⌈n / S⌉ rounds), which at T=0 is also the answer itself used as the
  oracle path; and the top-8 oracles of the corrector stage.
"""
from __future__ import annotations

import math
from statistics import fmean

MIN_PROMPTS = 16  # a family's pair with fewer prompts is descriptive (issue 50: >= 16 prompts per family)


def verdict(ci, null: float = 0.0) -> str:
    if not ci or ci[0] is None or ci[1] is None:
        return "no interval"
    return "win" if ci[0] > null else "loss" if ci[1] < null else "no effect shown"


def _per_prompt(bench: dict, suite: str, tk: str, arm: str) -> dict[str, float]:
    pp = (((bench.get("suites") or {}).get(suite) or {}).get(tk) or {}).get(arm, {}).get("per_prompt") or {}
    return {k: float(t) for k, t in zip(pp.get("prompt_id", []), pp.get("tau", [])) if t is not None}


def family_pair(bench: dict, a: str, b: str, suite: str, tk: str, min_prompts: int = MIN_PROMPTS,
                n_boot: int = 2000) -> dict | None:
    """One pair on one family (module doc); None when either arm did not decode that family at `tk`."""
    from draftlab.stats import bootstrap_interval

    ta, tb = _per_prompt(bench, suite, tk, a), _per_prompt(bench, suite, tk, b)
    keys = [k for k in ta if k in tb]
    if not keys:
        return None
    diffs = [ta[k] - tb[k] for k in keys]
    lo, mid, hi = bootstrap_interval(diffs, stat=fmean, n=n_boot)
    ci = [round(lo, 4), round(hi, 4)]
    return {"pair": f"{a} vs {b}", "family": suite, "temperature": tk, "prompts": len(keys),
            "tau_a": round(fmean(ta[k] for k in keys), 4), "tau_b": round(fmean(tb[k] for k in keys), 4),
            "tau_diff": round(mid, 4), "tau_diff_ci": ci,
            "verdict": verdict(ci) if len(keys) >= min_prompts else "descriptive"}


def family_pairs(bench: dict, pairs: list[list[str]], temperatures=("t0", "t1"),
                 min_prompts: int = MIN_PROMPTS) -> list[dict]:
    rows = []
    for a, b in pairs:
        for tk in temperatures:
            for suite in bench.get("suites") or {}:
                r = family_pair(bench, a, b, suite, tk, min_prompts)
                if r is not None:
                    rows.append(r)
    return rows


def overall_pairs(bench: dict) -> list[dict]:
    """The benchmark's own paired rows with their verdicts (Δτ against 0, the tokens/s ratio against 1)."""
    out = []
    for p in bench.get("pairs") or []:
        out.append({"pair": p["pair"], "temperature": p["temperature"], "ablation": p.get("ablation", False),
                    "prompts": sum((p.get("prompts") or {}).values()), "tau_diff": p.get("tau_diff"),
                    "tau_diff_ci": p.get("tau_diff_ci"), "tau_verdict": verdict(p.get("tau_diff_ci")),
                    "tokens_per_s_ratio": p.get("tokens_per_s_ratio"),
                    "tokens_per_s_ratio_ci": p.get("tokens_per_s_ratio_ci"),
                    "speed_verdict": verdict(p.get("tokens_per_s_ratio_ci"), 1.0)})
    return out


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


def report(bench: dict, pretrain: dict, corrector: dict | None, specopd: dict | None, block_size: int) -> dict:
    """Everything the analysis plan reads (module doc)."""
    pairs = [list(p) for p in (bench.get("config") or {}).get("pairs", [])] or [
        p["pair"].split(" vs ") for p in bench.get("pairs") or []]
    pairs = [p for p in pairs if "best" not in p]
    oracle = {}
    for v, r in ((corrector or {}).get("variants") or {}).items():
        oracle[v] = {k: r.get(k) for k in ("sim_tau", "sim_tau_uncorrected", "sim_tau_gain", "sim_tau_oracle",
                                           "sim_tau_oracle_reachable", "headroom_closed", "headroom_closed_reachable")}
    return {"overall_pairs": overall_pairs(bench),
            "family_pairs": family_pairs(bench, pairs),
            "consistency": consistency(pretrain, bench), "ceilings": ceilings(bench, block_size),
            "corrector_oracles": oracle,
            "specopd": {k: (specopd or {}).get(k) for k in ("specopd", "baselines")}}
