"""Size the benchmark's sample from a pilot run's detail file.

Per arm (the default): how many prompts per suite give every speculative arm a 95% interval on τ of ±0.03
(or --halfwidth), and what that costs in minutes.

    .venv/bin/python tools/size_benchmark.py                         # results/benchmark.json of this checkout
    .venv/bin/python tools/size_benchmark.py .smoke/results/benchmark.json --halfwidth 0.05
    .venv/bin/python tools/size_benchmark.py --sd 0.25               # assume a per-prompt τ spread (new drafter)

The rule (draftlab.bench.sizing.sizing_plan): n = ⌈z² Σ_s sd_s² / (S² h²)⌉ prompts per suite, with sd_s the
pilot's per-prompt τ standard deviation in suite s (× --safety), S suites and h the half-width; the largest n
over speculative arms and temperatures is the recommendation. The cost is each arm's measured seconds per
prompt (both temperatures, prefill included) plus the teacher-forced τ pass, times n × S; the concurrency
sweep does not grow with n. A pilot written before per-prompt values existed (an older
metrics/benchmark.json) still gives the cost; pass --sd for the spread. Set the result with
`benchmark.prompts_per_suite` (conf/profile/<profile>.yaml).

Paired (--paired): the verdicts the report states. For the `benchmark` section of --params (params.yaml, with
-S key=value overrides: the arms, pairs, ablation and T>0 subsets, the sweep, max_new_tokens), the prompts per
suite each pair's paired Δτ (±benchmark.target_tau_diff_halfwidth) and tokens/s ratio
(±benchmark.target_ratio_halfwidth) need, scaled from the pilot's answer length to max_new_tokens (the
assumptions: draftlab.bench.sizing), and the predicted minutes of the whole benchmark.

    .venv/bin/python tools/size_benchmark.py --paired --safety 1.5
    .venv/bin/python tools/size_benchmark.py --paired -S benchmark.max_new_tokens=192 -S benchmark.prompts_per_suite=8

--proxy-twins: a method arm on the seeded drafter that the pilot lacks is sized by its plain twin's pilot rows (the
arm table's naming rule: `dcoco-seeded` by `dcoco`), for a pilot from before the methods ran on the seeded drafter;
an assumption (on the seeded drafter spreads and costs differ), listed in the output. The seeded drafter's own arm
(`dflash-seeded`) is another drafter, not a method: it gets no proxy.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from draftlab.bench.sizing import BenchPlan, paired_plan, sizing_plan


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("detail", nargs="?", default="results/benchmark.json", help="a pilot's benchmark detail")
    ap.add_argument("--halfwidth", type=float, default=0.03, help="target half-width of the interval on τ")
    ap.add_argument("--level", type=float, default=0.95)
    ap.add_argument("--sd", type=float, default=None, help="per-prompt τ standard deviation to assume (every suite)")
    ap.add_argument("--safety", type=float, default=1.0, help="multiply the pilot's spreads (a small pilot "
                                                             "underestimates them about as often as not)")
    ap.add_argument("--json", action="store_true", help="print the plan as JSON")
    ap.add_argument("--paired", action="store_true", help="size the configured pairs (Δτ, tokens/s ratio) instead")
    ap.add_argument("--params", default="params.yaml", help="--paired: the config whose benchmark section to size")
    ap.add_argument("-S", dest="set", action="append", default=[], help="--paired: override a key (benchmark.x=y)")
    ap.add_argument("--spread-scaling", choices=("constant", "sqrt"), default="constant",
                    help="--paired: how the pilot's per-prompt spreads change with max_new_tokens")
    ap.add_argument("--overhead-minutes", type=float, default=2.0, help="--paired: loading and warm-up, added once")
    ap.add_argument("--proxy-twins", action="store_true", help="--paired: size an arm the pilot lacks by its plain "
                                                               "twin's rows (dcoco-seeded by dcoco); stated as assumed")
    a = ap.parse_args(argv)
    f = Path(a.detail)
    if not f.exists() and f == Path("results/benchmark.json") and Path("metrics/benchmark.json").exists():
        f = Path("metrics/benchmark.json")  # a checkout from before the headline/detail split
    try:
        detail = json.loads(f.read_text())
    except (OSError, ValueError) as e:
        print(f"error: {f} cannot be read ({type(e).__name__}); run `dvc repro benchmark` first", file=sys.stderr)
        return 2
    if a.paired:
        return paired(detail, f, a)
    plan = sizing_plan(detail, a.halfwidth, a.level, a.sd, a.safety)
    if a.json:
        print(json.dumps(plan, indent=2))
        return 0
    print(f"pilot: {f} ({', '.join(plan['suites'])}; prompts per suite: "
          f"{(detail.get('setup') or {}).get('prompts', '?')})")
    print(f"{'arm':18s} {'min/prompt':>10s}  per temperature: prompts per suite for ±{a.halfwidth} (per-suite sd)")
    for arm, e in plan["per_arm"].items():
        temps = [f"{tk}: n={v['prompts_per_suite']} (sd {', '.join(f'{x:.3f}' for x in v['sd_by_suite'].values())})"
                 for tk, v in e.items() if isinstance(v, dict) and "prompts_per_suite" in v]
        print(f"{arm:18s} {e['minutes_per_prompt']:10.3f}  {'; '.join(temps) or '-'}")
    print(f"teacher-forced τ pass: {plan['simulated_minutes_per_prompt']:.3f} min per prompt; all arms: "
          f"{plan['minutes_per_prompt_all_arms']:.2f} min per prompt and suite; sweep {plan['sweep_minutes']:.1f} min "
          f"(independent of the prompts)")
    for name, v in plan["pairs"].items():
        print(f"paired Δτ {name}: n={v['prompts_per_suite']} for ±{a.halfwidth} "
              f"(sd of per-prompt differences {', '.join(f'{x:.3f}' for x in v['sd_by_suite'].values())})")
    if plan["prompts_per_suite"] is None:
        print("no per-prompt τ in this pilot: pass --sd (e.g. --sd 0.2) to size from an assumed spread")
        return 0
    print(f"recommendation: benchmark.prompts_per_suite={plan['prompts_per_suite']} -> "
          f"{plan['minutes']:.0f} min for the per-suite runs ({len(plan['suites'])} suites) + the sweep")
    return 0


def paired(detail: dict, f: Path, a: argparse.Namespace) -> int:
    from draftlab.bench.arms import arm_names
    from draftlab.bench.sizing import with_proxies
    from draftlab.config.seeded import method_arm_base, plain_name
    from draftlab.errors import ConfigError
    from draftlab.params import load_params

    try:
        b = load_params(a.params, a.set).benchmark
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    plan = BenchPlan(arms=list(b.arms), pairs=[list(p) for p in b.pairs], suites=list(b.suites),
                     max_new_tokens=b.max_new_tokens,
                     prompts_per_suite=b.prompts_per_suite or None, ablation_arms=list(b.ablation_arms),
                     ablation_prompts_per_suite=b.ablation_prompts_per_suite, sampled_arms=list(b.sampled_arms),
                     sampled_prompts_per_suite=b.sampled_prompts_per_suite,
                     pair_prompts_per_suite=b.pair_extra(), temperatures=list(b.temperatures),
                     concurrency=list(b.concurrency), concurrency_arms=list(b.concurrency_arms),
                     concurrency_temperatures=list(b.concurrency_temperatures),
                     concurrency_max_new_tokens=b.concurrency_max_new_tokens, simulated=b.simulated)
    proxies = {}
    if a.proxy_twins:
        pilot_arms, known = set(detail.get("summary") or {}), arm_names()
        proxies = {arm: plain_name(arm) for arm in [*b.arms, *b.ablation_arms, *b.concurrency_arms]  # methods only
                   if arm not in pilot_arms and method_arm_base(arm, known) == "seeded" and plain_name(arm) in pilot_arms}
        detail = with_proxies(detail, proxies)
    res = paired_plan(detail, plan, b.target_tau_diff_halfwidth, b.target_ratio_halfwidth, a.level, a.safety,
                      a.spread_scaling, a.overhead_minutes)
    if a.json:
        print(json.dumps(res, indent=2))
        return 0
    print(f"pilot: {f} (max_new_tokens {res['pilot_max_new_tokens']}, prompts per suite "
          f"{(detail.get('setup') or {}).get('prompts', '?')}); predicted for max_new_tokens {res['max_new_tokens']}, "
          f"spreads × {a.safety} ({a.spread_scaling} with length). A PREDICTION from the pilot, not a measurement.")
    if proxies:
        print("arms not in the pilot, sized by their plain twin's rows (an assumption: --proxy-twins): "
              + ", ".join(f"{k} by {v}" for k, v in proxies.items()))
    if res["assumed_suites"]:
        print(f"suites {', '.join(res['suites'])}; not in the pilot, assumed at the pilot suites' root-mean-square "
              f"spread and mean cost: {', '.join(res['assumed_suites'])}")
    print(f"targets: Δτ ±{res['targets']['tau_diff']}, tokens/s ratio ±{res['targets']['tokens_per_s_ratio']} "
          f"({a.level:.0%} intervals)")
    print(f"{'pair':34s} {'n(Δτ)':>6s} {'n(ratio)':>8s}  {'at plan: n':>10s} {'±Δτ':>7s} {'±ratio':>7s}  sd Δτ | sd ratio")
    for name, e in res["pairs"].items():
        if e.get("missing"):
            print(f"{name:34s} (not in the pilot)")
            continue
        if not e.get("runs"):
            continue
        tag = " [ablation]" if e["ablation"] else ""
        sd = lambda k: ", ".join(f"{x:.3f}" for x in (e.get(f"{k}_sd_by_suite") or {}).values()) or "-"  # noqa: E731
        print(f"{name + tag:34s} {e.get('tau_prompts_per_suite', '-'):>6} {e.get('ratio_prompts_per_suite', '-'):>8}  "
              f"{e['prompts_at_plan']:>10} {e.get('tau_halfwidth_at_plan', '-'):>7} {e.get('ratio_halfwidth_at_plan', '-'):>7}"
              f"  {sd('tau')} | {sd('ratio')}")
    extra = f" and pair_prompts_per_suite={res['pair_prompts_per_suite']}" if res["pair_prompts_per_suite"] else ""
    print(f"headline pairs at T=0 meet the targets with prompts_per_suite={res['prompts_per_suite']}{extra}: "
          f"{res['meets_t0']}")
    if res["suggested_pair_prompts_per_suite"]:
        print("the pairs still short, with the prompts per suite each needs (their arms decode those at T=0): "
              f"-S 'benchmark.pair_prompts_per_suite={json.dumps(res['suggested_pair_prompts_per_suite'])}'")
    print(f"predicted minutes: {res['minutes']:.1f} ({', '.join(f'{k} {v}' for k, v in res['parts'].items())})")
    if res["missing_from_pilot"]:
        print(f"not in the pilot (no cost counted): {', '.join(res['missing_from_pilot'])}"
              + ("" if a.proxy_twins else "; --proxy-twins sizes a -seeded arm by its plain twin"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
