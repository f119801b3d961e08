"""Paired verdicts re-computed from a finished benchmark's per-prompt rows (results/benchmark.json), without
re-running it: the `benchmark.pairs` rows with and without looping prompts, by the current interval code.

    .venv/bin/python tools/pairs_from_detail.py [results/benchmark.json] [--out FILE] [--resamples 2000]

Use it when the interval code changed after a run (e.g. the `no_loop` rows, which before the pooled stratum had no
interval when a suite kept a single prompt without loops). Exact for `benchmark.batch_size: 1` (one prompt per
unit: its τ, tokens, seconds and loop flag are all the per-prompt rows hold); other batch sizes are refused.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from draftlab import paths

ROOT = Path(__file__).resolve().parents[1]


def units_from_detail(detail: dict) -> dict:
    """(suite, temperature key, arm) -> Units rebuilt from the per-prompt rows."""
    from draftlab.bench.uncertainty import Units

    out = {}
    for s, by_t in detail["suites"].items():
        for tk, by_arm in by_t.items():
            for arm, m in by_arm.items():
                pp = m.get("per_prompt")
                if not pp:
                    continue
                u = Units()
                for i, key in enumerate(pp["prompt_id"]):
                    if "," in key:
                        raise SystemExit(f"error: unit {key!r} of {arm} holds several prompts: this tool needs "
                                         f"benchmark.batch_size=1 (re-run the benchmark instead)")
                    tau = pp["tau"][i]
                    u.prompt_ids.append([key])
                    u.tokens.append(pp["tokens"][i])
                    u.wall_s.append(pp["wall_s"][i])
                    u.tau_sum.append(tau or 0.0)
                    u.tau_n.append(0.0 if tau is None else 1.0)
                    u.copy_share.append(pp["copy_share"][i])
                    u.repeat_share.append(pp["repeat_share"][i])
                    u.loop.append(bool(pp["loop"][i]))
                out[(s, tk, arm)] = u
    return out


def recompute(detail: dict, resamples: int) -> list[dict]:
    from draftlab.bench.uncertainty import Weights, pair_rows, replicates

    cfg, unc = detail.get("config") or {}, detail.get("uncertainty") or {}
    bench = cfg.get("benchmark", cfg)
    pairs, ablation = bench.get("pairs") or [], bench.get("ablation_arms") or []
    units = units_from_detail(detail)
    seed, level = unc.get("seed", 0), unc.get("level", 0.95)
    weights = Weights(resamples, seed)
    rep = replicates(units, resamples, seed, "ar", weights)
    return pair_rows(pairs, units, rep, weights, level, "ar", ablation)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("detail", nargs="?", default=str(ROOT / paths.BENCH_DETAIL))
    ap.add_argument("--out", help="write the rows here (JSON) as well")
    ap.add_argument("--resamples", type=int, default=2000)
    a = ap.parse_args(argv)
    path = Path(a.detail)
    if not path.exists():
        print(f"error: {path} not found: run the benchmark stage first (dvc repro benchmark)", file=sys.stderr)
        return 2
    rows = recompute(json.loads(path.read_text()), a.resamples)
    if not rows:
        print(f"error: {path} has no `benchmark.pairs` in its config to recompute", file=sys.stderr)
        return 2
    for r in rows:
        nl = r["no_loop"]
        print(f"{r['pair']:44s} {r['temperature']} Δτ {r['tau_diff']} {r['tau_diff_ci']} ratio {r['tokens_per_s_ratio']} "
              f"{r['tokens_per_s_ratio_ci']} | no loops ({sum(nl['prompts'].values())}): Δτ {nl['tau_diff']} "
              f"{nl['tau_diff_ci']} ratio {nl['tokens_per_s_ratio']} {nl['tokens_per_s_ratio_ci']}")
    if a.out:
        from draftlab.io import write_json

        write_json(Path(a.out), {"source": str(path), "resamples": a.resamples, "pairs": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
