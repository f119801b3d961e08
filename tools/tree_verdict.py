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
    from draftlab.errors import DraftlabError
    from draftlab.io import write_json
    from draftlab.pipeline import verdict

    got = verdict.options(argv, {"--budgets": verdict.ints, "--no-pair": None, "--note": str}, __doc__)
    if isinstance(got, int):
        return got
    opts, rest = got
    budgets, pair, note = opts.get("--budgets", [8, 16, 32, 64]), not opts.get("--no-pair"), opts.get("--note", "")
    arms, pairs = arms_and_pairs(budgets, pair)
    try:
        params = verdict.load(rest, arms, pairs, sampled=arms)
        detail = verdict.run_arms(params)
    except DraftlabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = {**verdict.record(" ".join(__doc__.split("\n\n")[0].split()), note, arms, detail, params), "budgets": budgets}
    out["flat_verify_model"] = flat_verify(detail, pairs)
    write_json(OUT, out)
    print(verdict.pairs_table(out["pairs"], out["flat_verify_model"], "a ÷ b if verify were flat (model)"))
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
