"""Stage pretrain_drafter: off-policy DFlash pretraining on the target's references (docs/algorithms.md "Pretraining").

Reads models/target and data/references.parquet; writes the best drafter (by held-out simulated τ)
to models/drafter/pretrained/ (config.json + model.safetensors), metrics/pretrain_drafter.json and
the budget curve plots/pretrain_budget.csv (simulated τ vs training minutes). The feature cache and
resumable Lightning checkpoints live under checkpoints/pretrain_drafter/ (git-ignored, not DVC
outputs), so an interrupted run resumes its step count when re-run with the same settings.
"""
from __future__ import annotations

from pathlib import Path

from draftlab import paths
from draftlab.pipeline.stage import (curve_csv, load_inputs, publish, require_references, stage_log,
    training_run)

OUT = Path(paths.PLAIN_DRAFTER)
METRICS = Path(paths.metrics("pretrain_drafter"))
CURVE = Path(paths.CURVES["pretrain_drafter"])
WORK = Path(paths.work("pretrain_drafter"))

_log = stage_log("pretrain_drafter")


def run(params) -> None:
    from draftlab.drafter.checkpoint import save_drafter
    from draftlab.recipes.pretrain.recipe import pretrain_from_references
    from draftlab.tracking import lightning_logger
    from draftlab.training.dist import is_rank_zero

    t = params.target
    require_references()
    target, df = load_inputs(params)
    with training_run("pretrain_drafter", params, ("target", "profile", "drafter", "pretrain")) as mlrun:
        logger = lightning_logger(mlrun, params.tracking.experiment)
        out = pretrain_from_references(target, df, params.drafter, params.pretrain, WORK, logger=logger, log=_log)
        if not is_rank_zero():  # DDP: the other ranks trained their shares; rank 0 writes the outputs
            return
        rep = with_resume(out.report, out.result.resume_exact)
        save_drafter(out.drafter, OUT, info={"stage": "pretrain_drafter", "profile": params.profile.name,
                                             "target": t.name, "best_step": rep["best_step"], "sim_tau": rep["sim_tau"]})
        publish(mlrun, {**rep, "target": t.name, "profile": params.profile.name}, METRICS, CURVE,
                lambda f: f.write_text(curve_csv(out.curve)))
        _log(f"held-out simulated tau {rep['sim_tau']:.3f} (best step {rep['best_step']}/{rep['steps']}, "
             f"{rep['train_minutes']:.1f} training min, {rep['train_tokens_per_s']:.0f} slot predictions/s)")


def with_resume(report: dict, exact: bool | None) -> dict:
    """The report with `resume_exact` beside `resumed_from_step`: None for a run that did not resume, True when the
    resumed run is the uninterrupted one (a step or epoch budget), False under a minute budget (docs/decisions.md,
    "Resume is the same run")."""
    out = {}
    for k, v in report.items():
        out[k] = v
        if k == "resumed_from_step":
            out["resume_exact"] = exact
    return out if "resume_exact" in out else {**out, "resume_exact": exact}
