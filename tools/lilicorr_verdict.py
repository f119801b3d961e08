"""LiLiCorr against DCOCO, DSpark, Domino and DFlash-2 on one run's base drafter (docs/results.md "LiLiCorr"): the
correctors' chains and the three tree rankings, side by side in one process, paired 95% intervals; writes
results/lilicorr.json.

    cd worlds/toy && python ../../tools/lilicorr_verdict.py     # the toy world, after its corrector stage
    python tools/lilicorr_verdict.py --train --greedy --pair-prompts 8   # the cpu run as committed

Run in a run's folder after its corrector stage. Without --train the arms decode the stage's own `lilicorr` (the
toy profile lists it in corrector.variants, so it trained there beside the others on the same budget). --train
co-trains `lilicorr` first, for a run whose stage did not: from the stage's base drafter, through the stage's own
recipe and settings (cotrain_from_references), for as many updates as the stage's `dcoco` made
(results/corrector.json) — equal updates, since minutes on a machine shared with other work are not an equal
budget — into checkpoints/lilicorr_verdict/correctors/lilicorr/, beside links to the stage's variants (the stage's
folder and dvc.lock are left as they are); its training report goes into the output file (`trained`), beside what
the stage's report says of the others (`stage`: updates, minutes, held-out simulated τ, the head's share of a round).

Arms (with the run's method suffix: -seeded when seeded.methods): ar, the base chain (dflash), dcoco, dspark, domino,
dflash2, lilicorr, its ablations lilicorr-nopair / lilicorr-frozen where trained, and for each budget N of --trees
(a comma list; default 16; 0: none) dflash-treeN, dcoco-treeN, lilicorr-treeN. Pairs: lilicorr against each of
the other correctors and the base chain, dcoco against the base chain, each ablation against lilicorr, lilicorr's
tree against its chain and the two other trees of the same budget. --greedy decodes T=0 only (else every arm at
every temperature of the run's benchmark); --pair-prompts N gives the chain pairs N prompts per suite
(benchmark.pair_prompts_per_suite); --note TEXT is kept in the file; --out PATH writes there instead (a second
reading of the same run). Extra arguments are params overrides (key=value).
"""
from __future__ import annotations

import sys
from pathlib import Path

from draftlab import paths

OUT = paths.LILICORR
WORK = Path(paths.LILICORR_WORK)
KEEP = (  # what --train's report keeps
    "steps", "train_minutes", "budget_minutes", "params_corrector", "k", "loss", "drafter_tau_before",
    "drafter_tau_after", "sim_tau", "sim_tau_se", "sim_tau_uncorrected", "sim_tau_oracle", "sim_tau_oracle_reachable",
    "headroom_closed_reachable", "proposal_share_of_round")
OTHERS = ("dcoco", "dspark", "domino", "dflash2")  # the correctors LiLiCorr is read against
ABLATIONS = ("lilicorr-nopair", "lilicorr-frozen")


def arms_and_pairs(suffix: str, budgets: list[int], ablations: list[str]) -> tuple[list[str], list[list[str]],
                                                                                  list[list[str]]]:
    """(arms, chain pairs, tree pairs) with the run's arm suffix; `budgets`: the trees' node budgets."""
    s = lambda a: a + suffix  # noqa: E731
    base, lili = s("dflash"), s("lilicorr")
    chains = [base, *(s(o) for o in OTHERS), lili, *(s(a) for a in ablations)]
    chain_pairs = [[lili, s(o)] for o in OTHERS] + [[lili, base], [s("dcoco"), base]]
    chain_pairs += [[s(a), lili] for a in ablations]
    trees, tree_pairs = [], []
    for n in trees_of(budgets):
        flat, pair, own = (s(f"{m}-tree{n}") for m in ("dflash", "dcoco", "lilicorr"))
        trees += [flat, pair, own]
        tree_pairs += [[own, lili], [own, pair], [own, flat]]
    return ["ar", *chains, *trees], chain_pairs, tree_pairs


def trees_of(budgets: list[int]) -> list[int]:
    """The tree budgets that decode (0 = no trees)."""
    return [n for n in budgets if n]


def main(argv: list[str]) -> int:
    from draftlab.errors import DraftlabError
    from draftlab.io import write_json
    from draftlab.pipeline import verdict

    got = verdict.options(argv, {"--trees": verdict.ints, "--greedy": None, "--train": None, "--pair-prompts": int,
                                 "--note": str, "--out": str}, __doc__)
    if isinstance(got, int):
        return got
    opts, rest = got
    trees, greedy, do_train = opts.get("--trees", [16]), opts.get("--greedy", False), opts.get("--train", False)
    pair_n, note, out_path = opts.get("--pair-prompts", 0), opts.get("--note", ""), opts.get("--out", OUT)
    try:
        from draftlab.params import load_params
        from draftlab.pipeline.names import method_names

        params = load_params(paths.PARAMS, rest, names=method_names())
        suffix = "-seeded" if params.seeded.enabled and params.seeded.methods else ""
        trained = None
        if do_train:
            trained = verdict.cotrain_beside(params, "lilicorr", "dcoco", WORK, KEEP,
                                             "tools/lilicorr_verdict.py --train")
        folder = WORK / "correctors" if do_train else Path(paths.CORRECTORS)
        missing = [v for v in ("lilicorr", *OTHERS) if not (folder / v / "corrector" / "config.json").exists()]
        if missing:
            raise DraftlabError(f"{folder} has no {', '.join(missing)}: run the corrector stage with them in "
                                "corrector.variants" + ("" if do_train else " (or --train for lilicorr)"))
        ablations = [a for a in ABLATIONS if (folder / a / "corrector" / "config.json").exists()]
        arms, chain_pairs, tree_pairs = arms_and_pairs(suffix, trees, ablations)
        sized = {f"{a} vs {b}": pair_n for a, b in chain_pairs} if pair_n else None
        over = rest + (["benchmark.temperatures=[0.0]"] if greedy else [])
        params = verdict.load(over, arms, chain_pairs + tree_pairs, sampled=[] if greedy else arms, pair_prompts=sized)
        detail = verdict.run_arms(params, str(folder) if do_train else None)
    except DraftlabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    about = " ".join(__doc__.split("\n\n")[0].split())
    out = {**verdict.record(about, note, arms, detail, params), "trees": trees_of(trees), "correctors": str(folder),
           "trained": trained,
           "stage": verdict.stage_report([*OTHERS, *([] if do_train else ["lilicorr"]), *ablations], KEEP)}
    write_json(out_path, out)
    print(verdict.pairs_table(out["pairs"]))
    print(f"wrote {out_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
