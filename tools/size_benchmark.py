"""Size the benchmark's sample from a pilot run's detail file.

Per arm (the default): how many prompts per suite give every speculative arm a 95% interval on τ of ±0.03
(or --halfwidth), and what that costs in minutes.

    .venv/bin/python tools/size_benchmark.py                         # results/benchmark.json of this checkout
    .venv/bin/python tools/size_benchmark.py .smoke/results/benchmark.json --halfwidth 0.05
    .venv/bin/python tools/size_benchmark.py --sd 0.25               # assume a per-prompt τ spread (new drafter)

The rule (draftlab.measure.sizing.sizing_plan): n = ⌈z² Σ_s sd_s² / (S² h²)⌉ prompts per suite, with sd_s the
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
assumptions: draftlab.measure.sizing), and the predicted minutes of the whole benchmark.

    .venv/bin/python tools/size_benchmark.py --paired --safety 1.5
    .venv/bin/python tools/size_benchmark.py --paired -S benchmark.max_new_tokens=192 -S benchmark.prompts_per_suite=8

--proxy-twins: a method arm on the seeded drafter that the pilot lacks is sized by its plain twin's pilot rows (the
arm table's naming rule: `dcoco-seeded` by `dcoco`), for a pilot from before the methods ran on the seeded drafter;
an assumption (on the seeded drafter spreads and costs differ), listed in the output. The seeded drafter's own arm
(`dflash-seeded`) is another drafter, not a method: it gets no proxy.

The numbers are draftlab.measure.sizing's, the text draftlab.measure.sizing_report's; this script is their command line.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from draftlab import paths
from draftlab.measure.sizing import paired_plan, sizing_plan
from draftlab.measure.sizing_report import bench_plan, paired_lines, per_arm_lines, twin_proxies


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("detail", nargs="?", default=paths.BENCH_DETAIL, help="a pilot's benchmark detail")
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
    if not f.exists() and f == Path(paths.BENCH_DETAIL) and Path(paths.LEGACY_BENCH_DETAIL).exists():
        f = Path(paths.LEGACY_BENCH_DETAIL)  # a checkout from before the headline/detail split
    try:
        detail = json.loads(f.read_text())
    except (OSError, ValueError) as e:
        print(f"error: {f} cannot be read ({type(e).__name__}); run `dvc repro benchmark` first", file=sys.stderr)
        return 2
    if a.paired:
        return paired(detail, f, a)
    plan = sizing_plan(detail, a.halfwidth, a.level, a.sd, a.safety)
    print(json.dumps(plan, indent=2) if a.json else "\n".join(per_arm_lines(plan, detail, f, a.halfwidth)))
    return 0


def paired(detail: dict, f: Path, a: argparse.Namespace) -> int:
    from draftlab.measure.sizing import with_proxies
    from draftlab.errors import ConfigError
    from draftlab.params import load_params

    try:
        b = load_params(a.params, a.set).benchmark
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    proxies = twin_proxies(detail, b) if a.proxy_twins else {}
    if a.proxy_twins:
        detail = with_proxies(detail, proxies)
    res = paired_plan(detail, bench_plan(b), b.target_tau_diff_halfwidth, b.target_ratio_halfwidth, a.level, a.safety,
                      a.spread_scaling, a.overhead_minutes)
    print(json.dumps(res, indent=2) if a.json else
          "\n".join(paired_lines(res, detail, f, a.level, a.safety, a.spread_scaling, proxies, a.proxy_twins)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
