"""Size the benchmark's sample: how many prompts per suite give every speculative arm a 95% interval on τ
of ±0.03 (or --halfwidth), and what that costs in minutes — from a pilot run's detail file.

    .venv/bin/python tools/size_benchmark.py                         # results/benchmark.json of this checkout
    .venv/bin/python tools/size_benchmark.py .smoke/results/benchmark.json --halfwidth 0.05
    .venv/bin/python tools/size_benchmark.py --sd 0.25               # assume a per-prompt τ spread (new drafter)

The rule (draftlab.bench.uncertainty.sizing_plan): n = ⌈z² Σ_s sd_s² / (S² h²)⌉ prompts per suite, with sd_s the
pilot's per-prompt τ standard deviation in suite s (× --safety), S suites and h the half-width; the largest n
over speculative arms and temperatures is the recommendation. The cost is each arm's measured seconds per
prompt (both temperatures, prefill included) plus the teacher-forced τ pass, times n × S; the concurrency
sweep does not grow with n. A pilot written before per-prompt values existed (an older
metrics/benchmark.json) still gives the cost; pass --sd for the spread. Set the result with
`benchmark.prompts_per_suite` (conf/profile/<profile>.yaml).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from draftlab.bench.uncertainty import sizing_plan


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("detail", nargs="?", default="results/benchmark.json", help="a pilot's benchmark detail")
    ap.add_argument("--halfwidth", type=float, default=0.03, help="target half-width of the interval on τ")
    ap.add_argument("--level", type=float, default=0.95)
    ap.add_argument("--sd", type=float, default=None, help="per-prompt τ standard deviation to assume (every suite)")
    ap.add_argument("--safety", type=float, default=1.0, help="multiply the pilot's spreads (a small pilot "
                                                             "underestimates them about as often as not)")
    ap.add_argument("--json", action="store_true", help="print the plan as JSON")
    a = ap.parse_args(argv)
    f = Path(a.detail)
    if not f.exists() and f == Path("results/benchmark.json") and Path("metrics/benchmark.json").exists():
        f = Path("metrics/benchmark.json")  # a checkout from before the headline/detail split
    try:
        detail = json.loads(f.read_text())
    except (OSError, ValueError) as e:
        print(f"error: {f} cannot be read ({type(e).__name__}); run `dvc repro benchmark` first", file=sys.stderr)
        return 2
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


if __name__ == "__main__":
    raise SystemExit(main())
