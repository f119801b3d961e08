"""The toy world's commands (docs/toy-world.md), run in the world's folder (worlds/toy/):

    python ../../tools/toy_world.py prompts [--train N] [--eval N]   # the world's prompt files (prompts/), from the preset
    python ../../tools/toy_world.py ideal [--examples N]              # before anything trains: results/ideal.json
    python ../../tools/toy_world.py properties [--prompts N]          # after the world's stages: results/world.json
    python ../../tools/toy_world.py report                            # after the benchmark: results/toy_report.json
    python ../../tools/toy_world.py replicate --freeze-base           # the prepared target + references, kept in git
    python ../../tools/toy_world.py replicate --seed 1 [--seed 2 ...] [--resume]   # replicates/<tid>/seed-N/
    python ../../tools/toy_world.py reading --arm ARM [--seed N] [--variants V,...] [--family MODULE]  # a first reading
    python ../../tools/toy_world.py addition --name NAME --seed N [--seed M ...]  # untrained arms on the replicates

`prompts` writes the training pool and one suite per family from the generator (`toy.world` of the target preset
named like the world's folder, conf/target/<world>.yaml, or --preset: the files must exist before params.yaml can be composed, since composing checks them);
`ideal`
computes, from the generator alone, what an ideal slot-wise drafter would see in each family (draftlab.toy.ideal:
per-slot top-1 and top-K, argmax and reachable-oracle τ, the T=1 room), the check that a world's intended structure
exists before any target trains; `properties`
measures the world (draftlab.pipeline.toy.properties) from prepare_target's, reference's and pretrain_drafter's
outputs and one decode of `ar` and `dflash` on its suites, and writes each property beside its bar and verdict;
`report` reads the finished run's reports and writes the analysis plan's verdicts (draftlab.pipeline.toy.report):
every pair overall and per family with its interval, the consistency check, the ceilings; `replicate` runs the
method stages again with other seeds in write-once folders (draftlab.pipeline.replicate), which `draftlab verdicts`
reads."""
import argparse
import json
import sys
from pathlib import Path

from draftlab import paths


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="toy_world.py", description="the toy world's prompt files and properties")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prompts")
    p.add_argument("--train", type=int, default=3000, help="prompts in the training pool (the train split)")
    p.add_argument("--eval", type=int, default=64, help="prompts per family suite (the eval split)")
    p.add_argument("--out", default="prompts")
    p.add_argument("--preset", help="the target preset holding the world (default: ../../conf/target/<this folder>.yaml)")
    i = sub.add_parser("ideal")
    i.add_argument("--preset", help="the target preset holding the world (default: ../../conf/target/<this folder>.yaml)")
    i.add_argument("--examples", type=int, default=128, help="eval-split examples per family")
    i.add_argument("--block", type=int, default=16, help="the drafter's block (anchor + block - 1 proposals)")
    i.add_argument("--k", type=int, default=8, help="candidates per slot (the oracle's K)")
    i.add_argument("--out", default=paths.WORLD_IDEAL)
    q = sub.add_parser("properties")
    q.add_argument("--prompts", type=int, default=16, help="prompts per family suite in the engine decode")
    q.add_argument("--out", default=paths.WORLD_PROPERTIES)
    r = sub.add_parser("report")
    r.add_argument("--out", default=paths.TOY_REPORT)
    rp = sub.add_parser("replicate", help="the method stages again with other seeds, in a write-once folder")
    rp.add_argument("--seed", type=int, action="append", default=[],
                    help="a replicate's seed (repeat for several, run one after the other)")
    rp.add_argument("--resume", action="store_true", help="continue an unfinished replicate of that seed")
    rp.add_argument("--freeze-base", action="store_true",
                    help="copy the world's prepared target and references into replicates/<tid>/base/ (once)")
    rd = sub.add_parser("reading", help="a new corrector's first reading: its stage and the benchmark on a "
                                         "replicate's committed plain drafter (draftlab.pipeline.reading)")
    rd.add_argument("--arm", required=True, help="the corrector's benchmark arm")
    rd.add_argument("--seed", type=int, default=1, help="the finished replicate whose plain drafter it starts from (0: the world's own, kept in its base)")
    rd.add_argument("--variants", default="", help="comma-separated corrector variants (default: the arm's)")
    rd.add_argument("--resume", action="store_true", help="continue an unfinished reading")
    rd.add_argument("--family", action="append", default=[], help="a corrector family module to add (its package on "
                                                                  "PYTHONPATH; its preset beside it), e.g. lastrank.lastrank")
    ad = sub.add_parser("addition", help="arms that train nothing new, benchmarked on each finished replicate's models "
                                          "under the addition's own plan (draftlab.pipeline.addition)")
    ad.add_argument("--name", required=True, help="the addition: additions/NAME/ holds its analysis_plan.yaml")
    ad.add_argument("--seed", type=int, action="append", default=[], help="a finished replicate's seed (repeat)")
    ad.add_argument("--resume", action="store_true", help="continue an unfinished run of the addition")
    a = ap.parse_args(argv)
    from draftlab.errors import DraftlabError

    try:
        if a.cmd == "replicate":
            from draftlab.pipeline import replicate as R

            if not a.freeze_base and not a.seed:
                raise DraftlabError("replicate: give --seed N (one or more) or --freeze-base")
            if a.freeze_base:
                print(json.dumps(R.freeze_base("."), indent=1))
            for seed in a.seed:
                rec = R.run_replicate(".", seed, resume=a.resume)
                print(json.dumps({k: rec.get(k) for k in ("seed", "status", "target_md5", "total")}))
            return 0
        if a.cmd == "addition":
            from draftlab.pipeline.addition import addition_folder, run_addition
            from draftlab.pipeline.calibration import write_calibration
            from draftlab.verdicts.plan import PLAN, read_plan

            plan = read_plan(addition_folder(Path("."), a.name) / PLAN)  # the plan first: it fixes the arms
            if not a.seed:
                raise DraftlabError("addition: give --seed N (one or more finished replicates)")
            for seed in a.seed:
                rec = run_addition(".", a.name, seed, plan, resume=a.resume)
                print(json.dumps({k: rec.get(k) for k in ("addition", "seed", "status", "total")}))
            print(json.dumps(write_calibration("."), indent=1))
            return 0
        if a.cmd == "reading":
            from draftlab.pipeline.reading import first_reading

            rec = first_reading(".", a.arm, a.seed, [v for v in a.variants.split(",") if v], resume=a.resume,
                                families=a.family)
            print(json.dumps({k: rec.get(k) for k in ("arm", "variants", "seed", "status", "planned_s", "total")}))
            return 0
        from draftlab.pipeline.toy import commands as C

        if a.cmd == "prompts":
            out = C.prompts(a.preset, a.out, a.train, a.eval)
        elif a.cmd == "ideal":
            out = C.ideal(a.preset, a.out, a.examples, a.block, a.k)
        elif a.cmd == "report":
            out = C.report(a.out)
        else:
            out = C.properties(a.out, a.prompts)
        print(json.dumps(out, indent=1))
        return 0
    except DraftlabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    raise SystemExit(main(sys.argv[1:]))
