"""The benchmark's sizing plans as the text tools/size_benchmark.py prints, and the plan of a configured
benchmark section (draftlab.measure.sizing computes the numbers).

- `per_arm_lines`: `sizing_plan`'s per-arm prompts for a τ half-width, the costs and the recommendation;
- `bench_plan`: the `benchmark` section of the parameters as a `BenchPlan` (arms, pairs, subsets, sweep, length);
- `twin_proxies`: for a pilot from before the methods ran on the seeded drafter, the `-seeded` method arms it lacks
  with the plain twin that stands in for each (the arm table's naming rule; the seeded drafter's own arm is
  another drafter, not a method: no proxy);
- `paired_lines`: `paired_plan`'s pairs, prompts per suite and predicted minutes, labelled a prediction.
"""
from __future__ import annotations

import json

from draftlab.measure.sizing import BenchPlan


def per_arm_lines(plan: dict, detail: dict, pilot, halfwidth: float) -> list[str]:
    """The per-arm sizing of `pilot` (its file name, for the text) at a τ half-width of `halfwidth`."""
    out = [f"pilot: {pilot} ({', '.join(plan['suites'])}; prompts per suite: "
           f"{(detail.get('setup') or {}).get('prompts', '?')})",
           f"{'arm':18s} {'min/prompt':>10s}  per temperature: prompts per suite for ±{halfwidth} (per-suite sd)"]
    for arm, e in plan["per_arm"].items():
        temps = [f"{tk}: n={v['prompts_per_suite']} (sd {', '.join(f'{x:.3f}' for x in v['sd_by_suite'].values())})"
                 for tk, v in e.items() if isinstance(v, dict) and "prompts_per_suite" in v]
        out.append(f"{arm:18s} {e['minutes_per_prompt']:10.3f}  {'; '.join(temps) or '-'}")
    out.append(f"teacher-forced τ pass: {plan['simulated_minutes_per_prompt']:.3f} min per prompt; all arms: "
               f"{plan['minutes_per_prompt_all_arms']:.2f} min per prompt and suite; sweep {plan['sweep_minutes']:.1f} min "
               f"(independent of the prompts)")
    for name, v in plan["pairs"].items():
        out.append(f"paired Δτ {name}: n={v['prompts_per_suite']} for ±{halfwidth} "
                   f"(sd of per-prompt differences {', '.join(f'{x:.3f}' for x in v['sd_by_suite'].values())})")
    if plan["prompts_per_suite"] is None:
        out.append("no per-prompt τ in this pilot: pass --sd (e.g. --sd 0.2) to size from an assumed spread")
        return out
    out.append(f"recommendation: benchmark.prompts_per_suite={plan['prompts_per_suite']} -> "
               f"{plan['minutes']:.0f} min for the per-suite runs ({len(plan['suites'])} suites) + the sweep")
    return out


def bench_plan(b) -> BenchPlan:
    """The benchmark section `b` (params.benchmark) as the plan `paired_plan` sizes."""
    return BenchPlan(arms=list(b.arms), pairs=[list(p) for p in b.pairs], suites=list(b.suites),
                     max_new_tokens=b.max_new_tokens,
                     prompts_per_suite=b.prompts_per_suite or None, ablation_arms=list(b.ablation_arms),
                     ablation_prompts_per_suite=b.ablation_prompts_per_suite, sampled_arms=list(b.sampled_arms),
                     sampled_prompts_per_suite=b.sampled_prompts_per_suite,
                     pair_prompts_per_suite=b.pair_extra(), temperatures=list(b.temperatures),
                     concurrency=list(b.concurrency), concurrency_arms=list(b.concurrency_arms),
                     concurrency_temperatures=list(b.concurrency_temperatures),
                     concurrency_max_new_tokens=b.concurrency_max_new_tokens, simulated=b.simulated)


def twin_proxies(detail: dict, b) -> dict[str, str]:
    """arm -> its plain twin, for every seeded method arm of `b` the pilot lacks whose twin the pilot has."""
    from draftlab.arms.grammar import arm_names
    from draftlab.config.seeded import method_arm_base, plain_name

    pilot_arms, known = set(detail.get("summary") or {}), arm_names()
    return {arm: plain_name(arm) for arm in [*b.arms, *b.ablation_arms, *b.concurrency_arms]  # methods only
            if arm not in pilot_arms and method_arm_base(arm, known) == "seeded" and plain_name(arm) in pilot_arms}


def paired_lines(res: dict, detail: dict, pilot, level: float, safety: float, spread_scaling: str,
                 proxies: dict[str, str], proxy_twins: bool) -> list[str]:
    """`paired_plan`'s result `res` for `pilot` (its file name) as text; `proxies`: the arms sized by a twin."""
    out = [f"pilot: {pilot} (max_new_tokens {res['pilot_max_new_tokens']}, prompts per suite "
           f"{(detail.get('setup') or {}).get('prompts', '?')}); predicted for max_new_tokens {res['max_new_tokens']}, "
           f"spreads × {safety} ({spread_scaling} with length). A PREDICTION from the pilot, not a measurement."]
    if proxies:
        out.append("arms not in the pilot, sized by their plain twin's rows (an assumption: --proxy-twins): "
                   + ", ".join(f"{k} by {v}" for k, v in proxies.items()))
    if res["assumed_suites"]:
        out.append(f"suites {', '.join(res['suites'])}; not in the pilot, assumed at the pilot suites' root-mean-square "
                   f"spread and mean cost: {', '.join(res['assumed_suites'])}")
    out.append(f"targets: Δτ ±{res['targets']['tau_diff']}, tokens/s ratio ±{res['targets']['tokens_per_s_ratio']} "
               f"({level:.0%} intervals)")
    out.append(f"{'pair':34s} {'n(Δτ)':>6s} {'n(ratio)':>8s}  {'at plan: n':>10s} {'±Δτ':>7s} {'±ratio':>7s}  sd Δτ | sd ratio")
    for name, e in res["pairs"].items():
        if e.get("missing"):
            out.append(f"{name:34s} (not in the pilot)")
            continue
        if not e.get("runs"):
            continue
        tag = " [ablation]" if e["ablation"] else ""
        sd = lambda k: ", ".join(f"{x:.3f}" for x in (e.get(f"{k}_sd_by_suite") or {}).values()) or "-"  # noqa: E731
        out.append(f"{name + tag:34s} {e.get('tau_prompts_per_suite', '-'):>6} {e.get('ratio_prompts_per_suite', '-'):>8}  "
                   f"{e['prompts_at_plan']:>10} {e.get('tau_halfwidth_at_plan', '-'):>7} "
                   f"{e.get('ratio_halfwidth_at_plan', '-'):>7}  {sd('tau')} | {sd('ratio')}")
    extra = f" and pair_prompts_per_suite={res['pair_prompts_per_suite']}" if res["pair_prompts_per_suite"] else ""
    out.append(f"headline pairs at T=0 meet the targets with prompts_per_suite={res['prompts_per_suite']}{extra}: "
               f"{res['meets_t0']}")
    if res["suggested_pair_prompts_per_suite"]:
        out.append("the pairs still short, with the prompts per suite each needs (their arms decode those at T=0): "
                   f"-S 'benchmark.pair_prompts_per_suite={json.dumps(res['suggested_pair_prompts_per_suite'])}'")
    out.append(f"predicted minutes: {res['minutes']:.1f} ({', '.join(f'{k} {v}' for k, v in res['parts'].items())})")
    if res["missing_from_pilot"]:
        out.append(f"not in the pilot (no cost counted): {', '.join(res['missing_from_pilot'])}"
                   + ("" if proxy_twins else "; --proxy-twins sizes a -seeded arm by its plain twin"))
    return out
