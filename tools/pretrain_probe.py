"""Drafter recipe probes: the pretrain_drafter recipe with overrides, at a fixed number of steps, on the
pipeline's references; each probe's held-out simulated τ goes into one ablation table.

    .venv/bin/python tools/pretrain_probe.py run NAME [--steps 208] [--dry] [section.key=value ...]
    .venv/bin/python tools/pretrain_probe.py table      # results/pretrain_ablation/*.json -> results/pretrain_ablation.json

`run` reads params.yaml (+ the overrides), models/target and data/references.parquet, trains under
checkpoints/probes/NAME (the tap-feature cache is shared between probes) and writes
results/pretrain_ablation/NAME.json. Probes compare at equal *steps*: on a shared 2-core machine the
wall-clock minutes of two probes are not comparable unless each ran alone (`train_minutes` is recorded
for that reading). `table` lists every probe beside the one named `base` with the difference in held-out τ.
A seeded drafter's probe also records the validation's per-slot seed report (`seed_report`: the seed's hit
rate, top-1 where a seed exists and where none does, overrides and how often they were right) and, when the
plain drafter exists (models/drafter/pretrained of stage pretrain_drafter, else the `base` probe's, which a
plain probe saves under checkpoints/probes/NAME/drafter), the pretrain_seeded
stage's comparison table (`comparison`: seeded vs teacher-forced lookup vs the `dflash-pld` hybrid vs plain, on
all / looping / non-looping held-out references, paired bootstrap intervals over sequences), e.g.

    .venv/bin/python tools/pretrain_probe.py run bias40 drafter.seed=lookup drafter.seed_bias=40 \
        pretrain.seed_bias_lr=0.05 pretrain.seed_dropout=0.1

`--dry` only resolves the settings (params.yaml + the overrides, checked) and prints the drafter's seed
settings and the pretraining budget, without loading the target or training.

The probes' settings, records and table are draftlab.measure.probes; this script is their command line (it
knows the files and calls the pipeline's pretraining and comparison).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from draftlab import paths
from draftlab.errors import DraftlabError
from draftlab.omp import configure
from draftlab.measure.probes import ablation_table, describe, plain_drafter, probe_params, probe_record, table_lines

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / paths.PROBES
TABLE = ROOT / paths.PROBE_TABLE
PLAIN = ROOT / paths.PLAIN_DRAFTER
BASE_PROBE = ROOT / paths.PROBE_WORK / "base" / "drafter"


def run_probe(name: str, steps: int, overrides: list[str]) -> dict:
    configure(ROOT / "params.yaml")  # before torch loads (draftlab.omp)
    import pandas as pd

    from draftlab.io import write_json
    from draftlab.recipes.pretrain.recipe import pretrain_from_references
    from draftlab.verifier.load import load_target

    params = probe_params(steps, overrides, ROOT / paths.PARAMS)
    t = params.target
    work = ROOT / paths.PROBE_WORK
    target = load_target(ROOT / paths.TARGET, t.device, t.dtype, t.attn_implementation)
    df = pd.read_parquet(ROOT / paths.REFERENCES)
    t0 = time.time()
    out = pretrain_from_references(target, df, params.drafter, params.pretrain, work, log=lambda m: print(m, flush=True))
    res = probe_record(name, overrides, out, t0)
    if params.drafter.seed == "none":  # a plain probe's drafter: the comparison's `plain` when the stage's is absent
        from draftlab.drafter.checkpoint import save_drafter

        save_drafter(out.drafter, work / name / "drafter", info={"probe": name, "sim_tau": out.report["sim_tau"]})
    elif plain_drafter((PLAIN, BASE_PROBE)) is not None:
        res["comparison"] = compare(target, df, out.drafter, params)
    write_json(OUT / f"{name}.json", res)
    return res


def compare(target, df, seeded, params) -> dict:
    """The pretrain_seeded stage's held-out comparison for this probe's drafter (without its per-sequence rows)."""
    from draftlab.drafter.checkpoint import load_drafter
    from draftlab.recipes.pretrain.seeded import heldout_comparison
    from draftlab.training.features import SequenceSet

    plain_dir = plain_drafter((PLAIN, BASE_PROBE))
    plain = load_drafter(plain_dir, target)
    comp = heldout_comparison(target, seeded, plain, SequenceSet.from_dataframe(df), params.pretrain.val_anchor_stride,
                              params.pld, log=lambda m: print(m, flush=True))
    return {"plain_drafter": str(plain_dir.relative_to(ROOT)), **{k: v for k, v in comp.items() if k != "per_sequence"}}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("name")
    r.add_argument("--steps", type=int, default=208)
    r.add_argument("--dry", action="store_true", help="only resolve and check the settings")
    r.add_argument("overrides", nargs="*")
    sub.add_parser("table")
    a, extra = ap.parse_known_args(argv)  # overrides may follow a flag (`run NAME --dry key=value ...`)
    if extra and (a.cmd != "run" or any(x.startswith("-") for x in extra)):
        ap.error(f"unrecognized arguments: {' '.join(extra)}")
    if extra:
        a.overrides = [*a.overrides, *extra]
    if a.cmd == "run" and a.dry:
        try:
            print(f"{a.name}: {describe(probe_params(a.steps, a.overrides, ROOT / 'params.yaml'))}")
        except DraftlabError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    elif a.cmd == "run":
        res = run_probe(a.name, a.steps, a.overrides)
        print(f"{a.name}: held-out sim τ {res['sim_tau']:.4f} after {res['steps']} steps")
    else:
        try:
            print("\n".join(table_lines(ablation_table(OUT, TABLE))))
        except DraftlabError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
