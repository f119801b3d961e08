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
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "results" / "pretrain_ablation"
TABLE = ROOT / "results" / "pretrain_ablation.json"


SEED_REPORT = ("seed_rate", "seed_hit", "slot_acc_seeded", "slot_acc_unseeded", "seed_override", "seed_override_right")


def probe_params(steps: int, overrides: list[str], params_file: Path = ROOT / "params.yaml"):
    """The probe's settings: params.yaml + the step budget + the overrides, checked (one-line errors)."""
    from draftlab.params import load_params

    return load_params(params_file, [f"pretrain.max_steps={steps}", *overrides])


def describe(params) -> str:
    d, p = params.drafter, params.pretrain
    return (f"drafter.seed={d.seed} seed_logit={d.seed_logit} seed_bias={d.seed_bias} draft_vocab_size="
            f"{d.draft_vocab_size}; pretrain.max_steps={p.max_steps} seed_dropout={p.seed_dropout} lr={p.lr} "
            f"seed_bias_lr={p.seed_bias_lr} seeded_slot_weight={p.seeded_slot_weight} init_from={p.init_from or '-'}")


def run_probe(name: str, steps: int, overrides: list[str]) -> dict:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import pandas as pd

    from draftlab.io import write_json
    from draftlab.pipeline.pretrain_drafter import pretrain_from_references
    from draftlab.verifier.load import load_target

    params = probe_params(steps, overrides)
    t = params.target
    work = ROOT / "checkpoints" / "probes"
    target = load_target(ROOT / "models" / "target", t.device, t.dtype, t.attn_implementation)
    df = pd.read_parquet(ROOT / "data" / "references.parquet")
    t0 = time.time()
    out = pretrain_from_references(target, df, params.drafter, params.pretrain, work, log=lambda m: print(m, flush=True))
    rep = out.report
    res = {"name": name, "overrides": overrides, "steps": rep["steps"], "best_step": rep["best_step"],
           "sim_tau": rep["sim_tau"], "per_set": rep["per_set"], "slot_acc": rep["slot_acc"],
           "top8": rep.get("top8_cov"), "train_minutes": rep["train_minutes"],
           "slot_preds_per_s": rep["train_tokens_per_s"], "wall_s": time.time() - t0, "curve": out.curve}
    best = out.result.best_metrics.get(rep["sim_tau_split"], {})
    if "seed_hit" in best:  # a seeded drafter: the validation's per-slot seed report at the best step
        res["seed_report"] = {k: best[k] for k in SEED_REPORT}
    if params.drafter.seed == "none":  # a plain probe's drafter: the comparison's `plain` when the stage's is absent
        from draftlab.drafter.checkpoint import save_drafter

        save_drafter(out.drafter, work / name / "drafter", info={"probe": name, "sim_tau": rep["sim_tau"]})
    elif plain_drafter() is not None:
        res["comparison"] = compare(target, df, out.drafter, params)
    write_json(OUT / f"{name}.json", res)
    return res


PLAIN = ROOT / "models" / "drafter" / "pretrained"
BASE_PROBE = ROOT / "checkpoints" / "probes" / "base" / "drafter"


def plain_drafter() -> Path | None:
    """The comparison's plain drafter: the pipeline's (stage pretrain_drafter), else the `base` probe's."""
    return next((p for p in (PLAIN, BASE_PROBE) if (p / "config.json").exists()), None)


def compare(target, df, seeded, params) -> dict:
    """The pretrain_seeded stage's held-out comparison for this probe's drafter (without its per-sequence rows)."""
    from draftlab.drafter.checkpoint import load_drafter
    from draftlab.pipeline.seeded import heldout_comparison
    from draftlab.training.features import SequenceSet

    plain_dir = plain_drafter()
    plain = load_drafter(plain_dir, target)
    comp = heldout_comparison(target, seeded, plain, SequenceSet.from_dataframe(df), params.pretrain.val_anchor_stride,
                              params.pld, log=lambda m: print(m, flush=True))
    return {"plain_drafter": str(plain_dir.relative_to(ROOT)), **{k: v for k, v in comp.items() if k != "per_sequence"}}


def comparison_row(r: dict) -> dict:
    """A probe's comparison as table columns: τ per method and seeded-minus-X intervals, per subset."""
    c = r.get("comparison")
    if not c:
        return {}
    return {"comparison": {s: {"sequences": c[s]["sequences"], "tau": c[s]["tau"],
                               "pairs": {k: {"diff": p["diff"], "ci": p["ci"]} for k, p in c[s]["pairs"].items()}}
                           for s in ("all", "looping", "non_looping")}}


def table() -> dict:
    from draftlab.io import read_json, write_json

    rows = {p.stem: read_json(p) for p in sorted(OUT.glob("*.json"))}
    if "base" not in rows:
        raise SystemExit(f"error: no probe named 'base' in {OUT}; run `tools/pretrain_probe.py run base` first")
    base = rows["base"]["sim_tau"]
    out = {"unit": "held-out simulated τ at equal steps", "base": base, "rows": [
        {"name": n, "overrides": r["overrides"], "steps": r["steps"], "sim_tau": r["sim_tau"],
         "delta_vs_base": r["sim_tau"] - base,
         "train_sample_tau": r["per_set"].get("train_sample", {}).get("sim_tau"),
         "slot1_acc": r["slot_acc"][0] if r["slot_acc"] else None, "train_minutes": r["train_minutes"],
         **({"seed_report": r["seed_report"]} if "seed_report" in r else {}), **comparison_row(r)}
        for n, r in rows.items()]}
    write_json(TABLE, out)
    return out


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
        from draftlab.errors import DraftlabError

        try:
            print(f"{a.name}: {describe(probe_params(a.steps, a.overrides))}")
        except DraftlabError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    elif a.cmd == "run":
        res = run_probe(a.name, a.steps, a.overrides)
        print(f"{a.name}: held-out sim τ {res['sim_tau']:.4f} after {res['steps']} steps")
    else:
        for row in table()["rows"]:
            print(f"{row['name']:>12}  τ {row['sim_tau']:.4f}  Δ {row['delta_vs_base']:+.4f}  {' '.join(row['overrides'])}")
            for s, c in row.get("comparison", {}).items():
                vs = "  ".join(f"{k} {v['diff']:+.3f} {v['ci']}" for k, v in c["pairs"].items())
                print(f"{'':>14}{s:>12} ({c['sequences']} seq): " + " ".join(f"{m} {t:.3f}" for m, t in c["tau"].items()
                                                                          if t is not None) + f"  | {vs}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
