"""Trees against chains on one run's models (docs/algorithms.md "Trees from the block"): the benchmark recipe over the
tree arms and their chains, side by side in one process, with paired 95% intervals; writes results/trees.json.

    cd worlds/toy && python ../../tools/tree_verdict.py            # the toy world (budgets 8..64 and cost-aware)
    python tools/tree_verdict.py --budgets 16 --no-pair            # the root's run at one budget, marginal ranking only

Run in a run's folder after its corrector stage (the `dcoco` arms decode its checkpoints; `--no-pair` needs only
the plain drafter). Arms: ar, dflash, dflash-tree<N> for each budget, dflash-treecost, and the same with dcoco
(its chain and its pair-ranked trees); pairs: every tree against its own chain, the pair-ranked tree against the
marginal one of the same budget, and the chains against AR — at every temperature of the run's benchmark section
(sampled arms = all). The run's other benchmark settings (suites, prompts, batch, interleave) are kept; the
concurrency sweep, ablations, resume and round records are off. `--note TEXT` is kept in the file (where the models
came from). Extra arguments are params overrides (key=value).
"""
from __future__ import annotations

import sys
from pathlib import Path

from draftlab import paths

OUT = paths.TREES


def arms_and_pairs(budgets: list[int], pair: bool, cost: bool = True) -> tuple[list[str], list[list[str]]]:
    opts = [f"tree{n}" for n in budgets] + (["treecost"] if cost else [])
    methods = ["dflash", "dcoco"] if pair else ["dflash"]
    arms = ["ar", *(a for m in methods for a in (m, *(f"{m}-{o}" for o in opts)))]
    pairs = [[m, "ar"] for m in methods] + [[f"{m}-{o}", m] for m in methods for o in opts]
    if pair:
        pairs += [[f"dcoco-{o}", f"dflash-{o}"] for o in opts]
    return arms, pairs


def flat_verify(detail: dict, pairs: list[list[str]]) -> dict:
    """What each tree-vs-chain pair would give if a verify pass cost the same whatever its width (a GPU's regime, as a
    model): per suite and temperature, the tree's round with its verify phase replaced by the chain's, then the
    ratio of tokens per round-millisecond, tree over chain; averaged over suites (equal weights). Not a measurement."""
    out = {}
    for a, b in pairs:
        if "-tree" not in a or "-tree" in b:
            continue
        for tk in ("t0", "t1"):
            ratios = []
            for by_t in detail["suites"].values():
                ea, eb = by_t.get(tk, {}).get(a), by_t.get(tk, {}).get(b)
                if not ea or not eb or not ea.get("tau") or not eb.get("tau"):
                    continue
                flat = ea["round_total_ms"] - ea["round_ms"]["verify"] + eb["round_ms"]["verify"]
                ratios.append((ea["tau"] / flat) / (eb["tau"] / eb["round_total_ms"]))
            if ratios:
                out[f"{a} vs {b} {tk}"] = round(sum(ratios) / len(ratios), 4)
    return out


def main(argv: list[str]) -> int:
    from dataclasses import fields

    from draftlab.errors import DraftlabError
    from draftlab.io import write_json
    from draftlab.markdown import markdown_table

    budgets, pair, rest, note = [8, 16, 32, 64], True, [], ""
    it = iter(argv)
    for a in it:
        if a == "--budgets":
            budgets = [int(x) for x in next(it).split(",")]
        elif a == "--no-pair":
            pair = False
        elif a == "--note":
            note = next(it)
        else:
            rest.append(a)
    arms, pairs = arms_and_pairs(budgets, pair)
    lst = lambda xs: "[" + ",".join(xs) + "]"  # noqa: E731
    overrides = [f"benchmark.arms={lst(arms)}", f"benchmark.sampled_arms={lst(arms)}", "benchmark.ablation_arms=[]",
                 "benchmark.concurrency=[]", "benchmark.resume=false", "benchmark.record_rounds=false",
                 "benchmark.pairs=[" + ",".join(lst(p) for p in pairs) + "]", *rest]
    try:
        from draftlab.arms.grammar import arm_names
        from draftlab.kernels.linear import install
        from draftlab.params import load_params
        from draftlab.pipeline import layout
        from draftlab.pipeline.benchmark import BenchPaths, run
        from draftlab.verifier.load import load_target

        params = load_params(paths.PARAMS, overrides, arms=arm_names())
        t = params.target
        target = load_target(paths.TARGET, t.device, t.dtype, t.attn_implementation)
        install(target.model, t.linear)
        target.compile_steps(params.engine.resolved(target.device.type))
        checkpoints = layout.checkpoints(params.benchmark.drafter)
        detail, _ = run(target, params, BenchPaths(checkpoints, None))
    except DraftlabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    keep = ("tau_t0", "tau_t1", "tokens_per_s_t0", "tokens_per_s_t1", "speedup_t0", "speedup_t1", "tau_t0_ci",
            "tau_t1_ci", "tokens_per_s_t0_ci", "tokens_per_s_t1_ci", "tokens_equal_ar_t0")
    out = {"about": __doc__.split("\n")[0], "note": note, "arms": arms, "budgets": budgets,
           "summary": {a: {k: v for k, v in e.items() if k in keep} for a, e in detail["summary"].items()},
           "pairs": [{k: r.get(k) for k in ("a", "b", "temperature", "tau_diff", "tau_diff_ci", "tokens_per_s_ratio",
                                             "tokens_per_s_ratio_ci")} for r in detail.get("pairs", [])],
           "setup": {k: detail.get("setup", {}).get(k) for k in ("target", "device", "dtype", "engine", "threads",
                                                                  "interleave", "prompts", "timing_s")},
           "benchmark": {f.name: getattr(params.benchmark, f.name) for f in fields(params.benchmark)
                         if f.name in ("suites", "prompts_per_suite", "max_new_tokens", "temperatures", "batch_size",
                                       "interleave")}}
    out["flat_verify_model"] = flat_verify(detail, pairs)
    write_json(OUT, out)
    def fmt(v, ci, f: str) -> str:
        return "n/a" if v is None else format(v, f) + (f" [{format(ci[0], f)}, {format(ci[1], f)}]" if ci else "")

    rows = [[r["a"], r["b"], r["temperature"], fmt(r["tau_diff"], r["tau_diff_ci"], "+.3f"),
             fmt(r["tokens_per_s_ratio"], r["tokens_per_s_ratio_ci"], ".3f")] for r in out["pairs"]]
    model = out["flat_verify_model"]
    for r in rows:
        r.append(format(model[f"{r[0]} vs {r[1]} {r[2]}"], ".3f") if f"{r[0]} vs {r[1]} {r[2]}" in model else "")
    print("\n".join(markdown_table(["a", "b", "T", "Δτ (a − b) [95%]", "tokens/s a ÷ b [95%]",
                                    "a ÷ b if verify were flat (model)"], rows)))
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
