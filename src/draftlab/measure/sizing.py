"""Sizing the benchmark from a pilot run's detail (results/benchmark.json): how many prompts per suite, at which
answer length, give the intervals a stated half-width, and what that costs (tools/size_benchmark.py prints it).

- `sizing_plan`: absolute per-arm τ intervals (n = ⌈z² Σ_s sd_s² / (S² h²)⌉ prompts per suite, the
  normal-approximation rule for the mean over S suites, sd_s the pilot's per-prompt τ spread in suite s).
- `paired_plan`: the verdicts the report states — for each configured pair, the paired Δτ (half-width
  target `tau_halfwidth`) and the tokens/s ratio (`ratio_halfwidth`), from the spreads of the pilot's
  per-prompt differences Δτ_i = τ_a,i − τ_b,i and ratios r_i = tps_a,i ÷ tps_b,i on the same prompts (the
  same rule; the ratio-of-sums estimator is approximated by the mean of per-prompt ratios), at T=0 and at
  T>0 for the pairs whose arms decode there; and the predicted minutes of a whole benchmark config at a
  new `max_new_tokens`.
- Scaling from the pilot's length L0 to L (assumptions, stated in the output): spreads are kept as measured
  (`spread_scaling="constant"`: conservative for the part of a prompt's spread that is round-to-round and
  timing noise, which shrinks about as sqrt(L0 / L); not for a between-prompt difference that grows with
  the answer, which is why `safety` multiplies them), or shrunk by sqrt(L0 / L) (`"sqrt"`: optimistic);
  cost per prompt = prefill + seconds per decoded token × the expected answer length, each pilot answer
  that hit L0 growing to L and one that stopped at EOS keeping its length, per-token cost as measured (it
  grows slowly with the context); the sweep scales with its own token count; the teacher-forced τ pass
  with L / L0; `overhead_minutes` (loading, warm-up) is added once. A suite of the plan that the pilot lacks
  (a new suite) is assumed to have the pilot suites' root-mean-square spread and their mean cost.
- `with_proxies`: a pilot in which arms it lacks stand in for arms it has (e.g. `dcoco-seeded` sized by the plain
  `dcoco`'s rows before any run decoded the methods on the seeded drafter): an assumption the caller states.
- `achieved`: the half-widths a finished run reached, paired and per arm, against the targets — what the
  benchmark stage records in `setup`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from draftlab.config.benchmark import arm_t0_prompts


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


# ---------------------------------------------------------------- paired sizing
@dataclass
class BenchPlan:
    """A benchmark config to predict: the `benchmark` keys that set its size (names as in BenchmarkConfig)."""

    arms: list[str]
    pairs: list[list[str]]
    suites: list[str] = field(default_factory=list)  # [] = the pilot's; a suite the pilot lacks gets its mean spread and cost
    max_new_tokens: int = 128
    prompts_per_suite: int | None = None  # None: the smallest n that meets every T=0 pair's targets
    ablation_arms: list[str] = field(default_factory=list)
    ablation_prompts_per_suite: int = 0  # 0 = prompts_per_suite
    sampled_arms: list[str] = field(default_factory=list)  # [] = every arm
    sampled_prompts_per_suite: int = 0  # 0 = prompts_per_suite
    pair_prompts_per_suite: dict[str, int] = field(default_factory=dict)  # "a vs b" -> n: that pair's arms, T=0
    temperatures: list[float] = field(default_factory=lambda: [0.0, 1.0])
    concurrency: list[int] = field(default_factory=list)
    concurrency_arms: list[str] = field(default_factory=list)
    concurrency_temperatures: list[float] = field(default_factory=lambda: [0.0])
    concurrency_max_new_tokens: int = 32
    simulated: bool = True


def t0_prompts(plan: BenchPlan, arm: str, n: int) -> int:
    """Prompts per suite `arm` decodes at T=0 when the headline sample is n (BenchmarkConfig.t0_prompts's rule)."""
    return arm_t0_prompts(arm, n, plan.ablation_arms, plan.ablation_prompts_per_suite, plan.pair_prompts_per_suite)


def with_proxies(detail: dict, proxies: dict[str, str]) -> dict:
    """A copy of the pilot `detail` in which each arm `new` of `proxies` (new -> pilot arm) has the pilot arm's rows
    (per suite and temperature, the sweep, the teacher-forced pass, the summary); arms the pilot has keep theirs."""
    out = {**detail}
    suites = {s: {tk: dict(arms) for tk, arms in temps.items()} for s, temps in (detail.get("suites") or {}).items()}
    conc = {tk: dict(arms) for tk, arms in (detail.get("concurrency") or {}).items()}
    sim, summ = dict(detail.get("simulated") or {}), dict(detail.get("summary") or {})
    for new, old in proxies.items():
        for table in [*(a for temps in suites.values() for a in temps.values()), *conc.values(), sim, summ]:
            if old in table and new not in table:
                table[new] = table[old]
    out.update(suites=suites, concurrency=conc, simulated=sim, summary=summ)
    return out


def _tk(t: float) -> str:
    return f"t{t:g}"


def _paired_values(suites: dict, tk: str, a: str, b: str) -> dict[str, tuple[list[float], list[float]]]:
    """suite -> (per-prompt Δτ, per-prompt tokens/s ratio) of a vs b on the prompts both decoded."""
    out = {}
    for s, temps in suites.items():
        pa = ((temps.get(tk) or {}).get(a) or {}).get("per_prompt") or {}
        pb = ((temps.get(tk) or {}).get(b) or {}).get("per_prompt") or {}
        if not pa or not pb:
            continue
        ib = {k: i for i, k in enumerate(pb.get("prompt_id") or [])}
        dtau, ratio = [], []
        for i, k in enumerate(pa.get("prompt_id") or []):
            j = ib.get(k)
            if j is None:
                continue
            ta, tb = pa["tau"][i], pb["tau"][j]
            ta = 1.0 if ta is None and a == "ar" else ta  # AR: τ = 1; a reference row (hf-generate*): unknown
            tb = 1.0 if tb is None and b == "ar" else tb
            if ta is not None and tb is not None:
                dtau.append(ta - tb)
            ra, rb = pa["tokens_per_s"][i], pb["tokens_per_s"][j]
            if ra and rb:
                ratio.append(ra / rb)
        out[s] = (dtau, ratio)
    return out


def _need(sds: dict[str, float], halfwidth: float, level: float) -> int:
    return prompts_for_halfwidth({s: max(v, 1e-9) for s, v in sds.items()}, halfwidth, level)


def pair_sizes(detail: dict, pairs: list[list[str]], temperatures: list[float], tau_halfwidth: float = 0.10,
               ratio_halfwidth: float = 0.05, level: float = 0.95, safety: float = 1.0, scale: float = 1.0,
               suites: list[str] | None = None) -> dict:
    """Per pair and temperature key: the per-suite spreads of the per-prompt Δτ and ratio (× safety × scale) and
    the prompts per suite each target needs. A pair with `best` or an arm absent from the pilot is reported
    as `missing`. `suites`: the suites to size (default the pilot's); one the pilot lacks is assumed to have
    the root-mean-square spread of the pilot's suites (listed in `assumed_suites`); a pilot suite not in
    `suites` is left out."""
    pilot = detail.get("suites") or {}
    out: dict = {}
    for t in temperatures:
        tk = _tk(t)
        for a, b in pairs:
            name = f"{a} vs {b} ({tk})"
            vals = _paired_values(pilot, tk, a, b) if "best" not in (a, b) else {}
            if not vals:
                out[name] = {"temperature": tk, "missing": True}
                continue
            e: dict = {"temperature": tk, "a": a, "b": b, "missing": False}
            for key, idx, h in (("tau", 0, tau_halfwidth), ("ratio", 1, ratio_halfwidth)):
                sds = {s: _sd(v[idx]) for s, v in vals.items()}
                if not sds or any(v is None for v in sds.values()):
                    continue  # no τ for this pair (a reference row) or a single pilot prompt
                sds = {s: v * safety * scale for s, v in sds.items()}
                rms = math.sqrt(sum(v * v for v in sds.values()) / len(sds))
                extra = [x for x in (suites or []) if x not in sds]
                if suites:  # only the plan's suites count
                    sds = {x: v for x, v in sds.items() if x in suites}
                sds.update({x: rms for x in extra})
                if extra:
                    e["assumed_suites"] = extra
                e[f"{key}_sd_by_suite"] = {s: round(v, 4) for s, v in sds.items()}
                e[f"{key}_prompts_per_suite"] = _need(sds, h, level)
            out[name] = e
    return out


def _arm_seconds(detail: dict, arm: str, tk: str, L: int) -> float | None:
    """Predicted seconds per prompt of `arm` at `tk` with max_new_tokens L (mean over the pilot's suites)."""
    L0 = int((detail.get("config") or {}).get("max_new_tokens") or 0)
    per = []
    for temps in (detail.get("suites") or {}).values():
        m = (temps.get(tk) or {}).get(arm)
        if not m or not m.get("requests"):
            continue
        n, tokens, wall = m["requests"], m["tokens"], m["wall_s"]
        prefill = (m.get("prefill_s") or 0.0) * n  # mean per batch × batches (batch size 1)
        per_token = (wall - prefill) / max(tokens - n, 1)
        toks = (m.get("per_prompt") or {}).get("tokens") or [tokens / n] * n
        grow = [x if L0 and x < L0 else L * x / L0 if L0 else x for x in toks]  # an EOS answer keeps its length
        per.append(prefill / n + per_token * (sum(grow) / len(grow) - 1))
    return float(np.mean(per)) if per else None


def plan_minutes(detail: dict, plan: BenchPlan, n: int, overhead_minutes: float = 2.0) -> dict:
    """Predicted minutes of the benchmark `plan` with n prompts per suite, by part."""
    S = len(plan.suites) or len(detail.get("suites") or {})  # a suite the pilot lacks costs the pilot's mean
    L = plan.max_new_tokens
    n_abl = plan.ablation_prompts_per_suite or n
    n_smp = plan.sampled_prompts_per_suite or n
    parts = {"headline_t0": 0.0, "sampled": 0.0, "ablation": 0.0}
    missing = []
    for arm in [*plan.arms, *plan.ablation_arms]:
        abl = arm in plan.ablation_arms
        for t in plan.temperatures:
            tk = _tk(t)
            if t > 0 and plan.sampled_arms and arm not in plan.sampled_arms:
                continue
            sec = _arm_seconds(detail, arm, tk, L)
            if sec is None:  # at T>0: a greedy-only reference row (no pilot row either)
                if t == 0:
                    missing.append(f"{arm} ({tk})")
                continue
            k = min(n_abl, n_smp) if (abl and t > 0) else n_abl if abl else n_smp if t > 0 else t0_prompts(plan, arm, n)
            parts["ablation" if abl else "sampled" if t > 0 else "headline_t0"] += sec * k * S / 60
    cfg = detail.get("config") or {}
    Ls0 = int(cfg.get("concurrency_max_new_tokens") or 0) or 1
    sweep = 0.0
    conc = detail.get("concurrency") or {}
    running = [*plan.arms, *plan.ablation_arms]
    for t in plan.concurrency_temperatures:
        for arm in (plan.concurrency_arms or running):
            if arm not in running:
                continue
            levels = (conc.get(_tk(t)) or {}).get(arm) or {}
            for c in plan.concurrency:
                m = levels.get(str(c))
                if m is None:
                    missing.append(f"sweep {arm} c={c} ({_tk(t)})")
                    continue
                sweep += m["wall_s"] * plan.concurrency_max_new_tokens / Ls0 / 60
    parts["sweep"] = sweep
    setup = detail.get("setup") or {}
    sim = (setup.get("timing_s") or {}).get("simulated") or 0.0
    simulated = detail.get("simulated") or {}
    seqs = sum(v.get("sequences", 0) for per in simulated.values() for v in per.values())
    L0 = int(cfg.get("max_new_tokens") or L)
    per_seq = sim / seqs if seqs else 0.0  # seconds per (arm, answer) of the teacher-forced pass
    sim_arms = [a for a in running if a in simulated]
    parts["simulated"] = (per_seq * L / L0 * S * sum(n_abl if a in plan.ablation_arms else n for a in sim_arms) / 60
                          if plan.simulated else 0.0)
    parts["overhead"] = overhead_minutes
    return {"minutes": sum(parts.values()), "parts": {k: round(v, 2) for k, v in parts.items()},
            "missing_from_pilot": sorted(set(missing))}


def paired_plan(detail: dict, plan: BenchPlan, tau_halfwidth: float = 0.10, ratio_halfwidth: float = 0.05,
                level: float = 0.95, safety: float = 1.0, spread_scaling: str = "constant",
                overhead_minutes: float = 2.0) -> dict:
    """The paired sizing of `plan` from the pilot `detail`: per pair the prompts per suite each target needs at
    T=0 (and T>0 for the pairs whose arms decode there), the n chosen (`plan.prompts_per_suite`, or the
    smallest n meeting every T=0 pair), the half-widths predicted at the sizes the plan gives each pair, and
    the predicted minutes."""
    L0 = int((detail.get("config") or {}).get("max_new_tokens") or plan.max_new_tokens)
    if spread_scaling not in ("constant", "sqrt"):
        raise ValueError(f"spread_scaling={spread_scaling!r}: choose constant or sqrt")
    scale = 1.0 if spread_scaling == "constant" else math.sqrt(L0 / plan.max_new_tokens)
    running = {*plan.arms, *plan.ablation_arms}
    pairs = [p for p in plan.pairs if all(a in running or a == "best" for a in p)]
    sampled = set(plan.sampled_arms or running)
    sizes: dict = {}
    for t in plan.temperatures:  # at T>0 only the pairs whose two arms decode there
        mine = pairs if t == 0 else [p for p in pairs if all(a in sampled for a in p)]
        sizes.update(pair_sizes(detail, mine, [t], tau_halfwidth, ratio_halfwidth, level, safety, scale,
                                plan.suites or None))
    for e in sizes.values():
        if e.get("missing"):
            continue
        e["ablation"] = e["a"] in plan.ablation_arms or e["b"] in plan.ablation_arms
        e["runs"] = True
        e["prompts_per_suite"] = max([e.get("tau_prompts_per_suite", 2), e.get("ratio_prompts_per_suite", 2)])
    headline_t0 = [e for e in sizes.values() if not e.get("missing") and e["temperature"] == "t0" and not e["ablation"]]
    n = plan.prompts_per_suite or max([e["prompts_per_suite"] for e in headline_t0], default=2)
    for e in sizes.values():
        if e.get("missing") or not e["runs"]:
            continue
        k = n
        if e["ablation"]:
            k = min(k, plan.ablation_prompts_per_suite or n)
        if e["temperature"] != "t0":
            k = min(k, plan.sampled_prompts_per_suite or n)
        elif not e["ablation"]:  # the prompts both arms decode: a pair's extra prompts included
            k = min(t0_prompts(plan, e["a"], n), t0_prompts(plan, e["b"], n))
        e["prompts_at_plan"] = k
        for key in ("tau", "ratio"):
            if f"{key}_sd_by_suite" in e:
                e[f"{key}_halfwidth_at_plan"] = round(halfwidth_for(e[f"{key}_sd_by_suite"], k, level), 4)
        e["meets"] = (e.get("tau_halfwidth_at_plan", 0) <= tau_halfwidth
                      and e.get("ratio_halfwidth_at_plan", 0) <= ratio_halfwidth)
    # the pairs still short at the plan, with the prompts per suite each needs (benchmark.pair_prompts_per_suite)
    suggest = {f"{e['a']} vs {e['b']}": e["prompts_per_suite"] for e in headline_t0
               if not e.get("meets", True) and e["prompts_per_suite"] > e.get("prompts_at_plan", n)}
    cost = plan_minutes(detail, plan, n, overhead_minutes)
    return {"pilot_max_new_tokens": L0, "max_new_tokens": plan.max_new_tokens, "prompts_per_suite": n,
            "suites": plan.suites or sorted(detail.get("suites") or {}),
            "assumed_suites": [x for x in plan.suites if x not in (detail.get("suites") or {})],
            "targets": {"tau_diff": tau_halfwidth, "tokens_per_s_ratio": ratio_halfwidth}, "level": level,
            "safety": safety, "spread_scaling": spread_scaling, "pairs": sizes,
            "meets_t0": all(e.get("meets", False) for e in headline_t0),
            "pair_prompts_per_suite": dict(plan.pair_prompts_per_suite), "suggested_pair_prompts_per_suite": suggest,
            **cost}


# ---------------------------------------------------------------- what a run achieved
def achieved(detail: dict, tau_halfwidth: float = 0.10, ratio_halfwidth: float = 0.05) -> dict:
    """The half-widths a finished run's intervals reached: per pair (Δτ, ratio; with and without looping
    prompts) and per arm (τ, speedup, tokens/s per temperature), and whether every headline pair met the
    targets at T=0."""
    pairs = {}
    for r in detail.get("pairs") or []:
        name = f"{r['a']} vs {r['b']} ({r['temperature']})"
        e = {"ablation": r.get("ablation", False), "prompts": r.get("prompts"),
             "tau_diff": r.get("tau_diff_halfwidth"), "tokens_per_s_ratio": r.get("tokens_per_s_ratio_halfwidth")}
        nl = r.get("no_loop") or {}
        e["no_loop"] = {"prompts": nl.get("prompts"), "tau_diff": nl.get("tau_diff_halfwidth"),
                        "tokens_per_s_ratio": nl.get("tokens_per_s_ratio_halfwidth")}
        e["meets"] = (e["tau_diff"] is None or e["tau_diff"] <= tau_halfwidth) and \
            e["tokens_per_s_ratio"] is not None and e["tokens_per_s_ratio"] <= ratio_halfwidth
        pairs[name] = e
    arms = {}
    for arm, e in (detail.get("summary") or {}).items():
        row = {}
        for k, ci in e.items():
            if k.endswith("_ci") and ci and None not in ci and k.split("_t")[0] in ("tau", "speedup", "tokens_per_s"):
                row[k[:-3]] = round((ci[1] - ci[0]) / 2, 6)
        arms[arm] = row
    head_t0 = [e for k, e in pairs.items() if k.endswith("(t0)") and not e["ablation"]]
    return {"targets": {"tau_diff": tau_halfwidth, "tokens_per_s_ratio": ratio_halfwidth}, "pairs": pairs, "arms": arms,
            "pairs_meet_targets_t0": all(e["meets"] for e in head_t0) if head_t0 else None}
