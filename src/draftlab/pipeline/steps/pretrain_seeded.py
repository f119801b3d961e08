"""Stage pretrain_seeded: the seeded drafter (drafter.seed=lookup; docs/algorithms.md "Seeded block drafting"),
trained beside the plain one.

Enabled (`seeded.enabled: true`: the cpu, cpu-long and smoke profiles): the plain drafter's recipe
(draftlab.recipes.pretrain.recipe) with the `seeded` section's overrides of drafter.* / pretrain.* applied
(`SeededConfig.resolve`), on the same references; writes models/drafter/seeded/ (read by the `dflash-seeded`
arm), the budget curve plots/pretrain_seeded_budget.csv and the report results/pretrain_seeded.json with its
`comparison` table: the seeded drafter against teacher-forced prompt lookup, the `dflash-pld` hybrid and the
plain drafter of models/drafter/pretrained on the held-out references (draftlab.recipes.pretrain.seeded), headline in
metrics/pretrain_seeded.json; one MLflow run. Its resumable runs live under checkpoints/pretrain_seeded/; the
tap-feature cache is the plain run's (checkpoints/pretrain_drafter/features, keyed by data + taps: one copy on disk).
Disabled (the gpu profile): no training; the folder holds only `disabled.json` and the report says
`enabled: false`, so DVC has its outputs and the benchmark refuses `dflash-seeded` in one line.
"""
from __future__ import annotations

from pathlib import Path

from draftlab import paths
from draftlab.pipeline.stage import (curve_csv, load_inputs, publish, require_references, stage_log,
    training_run, write_report)

OUT = Path(paths.SEEDED_DRAFTER)
PLAIN = Path(paths.PLAIN_DRAFTER)  # the plain drafter (stage pretrain_drafter): the comparison's
METRICS = Path(paths.metrics("pretrain_seeded"))
CURVE = Path(paths.CURVES["pretrain_seeded"])
WORK = Path(paths.work("pretrain_seeded"))
FEATURES = Path(paths.PRETRAIN_FEATURES)  # the plain run's tap-feature cache, reused when it matches

_log = stage_log("pretrain_seeded")


def write_disabled(params) -> None:
    """The outputs of a disabled run: a folder with `disabled.json` only, the report, the headline, a curve header."""
    from draftlab.drafter.checkpoint import DISABLED
    from draftlab.io import atomic_write, write_json_folder

    note = {"enabled": False, "profile": params.profile.name,
            "why": "seeded.enabled=false: no seeded drafter trained (set seeded.enabled=true to train one)"}
    write_json_folder(OUT, {Path(DISABLED).stem: note})
    write_report("pretrain_seeded", note)
    atomic_write(CURVE, lambda f: f.write_text("step,train_minutes,heldout\n"))
    _log(note["why"])


def comparison_metrics(comp: dict) -> dict:
    """The comparison table's τ and paired differences as flat MLflow metrics (comparison/<subset>/...)."""
    out = {}
    for subset in ("all", "looping", "non_looping"):
        e = comp[subset]
        out.update({f"comparison/{subset}/{m}_tau": v for m, v in e["tau"].items() if v is not None})
        out.update({f"comparison/{subset}/{k}_diff": r["diff"] for k, r in e["pairs"].items() if r["diff"] is not None})
    return out


def run(params) -> None:
    from draftlab.drafter.checkpoint import load_drafter, save_drafter
    from draftlab.recipes.pretrain.seeded import pretrain_seeded
    from draftlab.tracking import lightning_logger
    from draftlab.training.dist import is_rank_zero

    if not params.seeded.enabled:
        if is_rank_zero():
            write_disabled(params)
        return
    t = params.target
    require_references()
    dcfg, pcfg = params.seeded.resolve(params.drafter, params.pretrain)
    target, df = load_inputs(params)
    plain = load_drafter(PLAIN, target)
    with training_run("pretrain_seeded", params, ("target", "profile", "drafter", "pretrain", "seeded", "pld")) as mlrun:
        logger = lightning_logger(mlrun, params.tracking.experiment)
        out = pretrain_seeded(target, df, plain, dcfg, pcfg, params.pld, WORK, logger=logger, log=_log,
                              seed=params.profile.seed, feature_root=FEATURES)
        if not is_rank_zero():  # DDP: the other ranks trained their shares; rank 0 writes the outputs
            return
        rep = {**out.report, "enabled": True, "seed": dcfg.seed, "seed_logit": dcfg.seed_logit,
               "overrides": {"drafter": dict(params.seeded.drafter), "pretrain": dict(params.seeded.pretrain)}}
        save_drafter(out.drafter, OUT, info={"stage": "pretrain_seeded", "profile": params.profile.name,
                                             "target": t.name, "best_step": rep["best_step"], "sim_tau": rep["sim_tau"]})
        publish(mlrun, {**rep, "target": t.name, "profile": params.profile.name}, METRICS, CURVE,
                lambda f: f.write_text(curve_csv(out.curve)),
                extra_metrics=comparison_metrics(rep["comparison"]))
        _log(f"held-out simulated tau {rep['sim_tau']:.3f} (best step {rep['best_step']}/{rep['steps']}, "
             f"{rep['train_minutes']:.1f} training min)")
