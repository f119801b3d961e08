"""Stage specopd: branch-parallel on-policy distillation of the base drafter (docs/algorithms.md "SpecOPD").

Reads models/target, data/references.parquet and the base drafter: models/drafter/pretrained (the plain one,
`specopd.base_drafter`), or models/drafter/seeded when `seeded.methods` (the arms are then
`dflash-specopd-seeded`); the report and each state's `info` record which (`base_kind`, `base_folder`). Writes SpecOPD's two kept
states, models/drafter/specopd/t0/ (best held-out greedy simulated τ: the T=0 arms) and .../t1/ (best
held-out T=1 surrogate: the T=1 arms), each saying in its config.json `info` how it was selected and
whether it is the initialisation; metrics/specopd.json (both selected states, simulated τ before/after,
every baseline at equal steps, supervised positions/s and per branch, analytic vs measured scoring cost)
and plots/specopd_budget.csv. Reuses the pretraining stage's tap-feature
cache when `specopd.cache_features` (false: no cache, the taps are computed in each step); resumable runs live under checkpoints/specopd/ (git-ignored, not DVC outputs).
"""
from __future__ import annotations

from pathlib import Path

from draftlab import paths
from draftlab.pipeline.stage import (load_inputs, numeric, publish, require_references, stage_log,
    training_run)

OUT = Path(paths.SPECOPD_DRAFTER)
METRICS = Path(paths.metrics("specopd"))
CURVE = Path(paths.CURVES["specopd"])
WORK = Path(paths.work("specopd"))
FEATURES = Path(paths.PRETRAIN_FEATURES)


_log = stage_log("specopd")


def run(params) -> None:
    import pandas as pd

    from draftlab.errors import DraftlabError
    from draftlab.drafter.checkpoint import save_drafter
    from draftlab.pipeline.layout import method_base
    from draftlab.tracking import lightning_logger
    from draftlab.training.dist import is_rank_zero
    from draftlab.recipes.specopd.recipe import specopd_from_references

    t, cfg = params.target, params.specopd
    require_references()
    base = method_base(params.seeded.methods, cfg.base_drafter)
    if not (Path(base.folder) / "config.json").exists():
        raise DraftlabError(f"{base.folder} not found; run the {base.stage} stage first")
    base.check()
    target, df = load_inputs(params)
    _log(f"training on the {base.kind} drafter {base.folder}")
    with training_run("specopd", params, ("target", "profile", "specopd", "seeded")) as mlrun:
        out = specopd_from_references(target, df, cfg, base.folder, WORK, FEATURES,
                                      logger=lightning_logger(mlrun, params.tracking.experiment), log=_log)
        if not is_rank_zero():  # DDP: the other ranks trained their shares; rank 0 writes the outputs
            return
        rep = {**out.report, **base.record(), "target": t.name, "profile": params.profile.name}
        for name, (drafter, sel) in out.states().items():
            save_drafter(drafter, OUT / name, info={"stage": "specopd", "profile": params.profile.name,
                                                    "target": t.name, "base": base.folder, **base.record(), **sel})
        cols = list(out.curve[0]) if out.curve else ["step", "train_minutes", "heldout"]
        extra = {k: v for obj, row in rep["baselines"].items() for k, v in numeric(row, f"baseline/{obj}/").items()}
        extra.update({f"cost/{k}": v for k, v in rep["scoring_cost"].items() if isinstance(v, (int, float))})
        extra.update({k: v for name, sel in rep["selected"].items() for k, v in numeric(sel, f"selected/{name}/").items()})
        publish(mlrun, rep, METRICS, CURVE,
                lambda f: pd.DataFrame(out.curve, columns=cols).to_csv(f, index=False, float_format="%.4f"), extra)
        _log(f"held-out simulated tau {rep['sim_tau_before']} -> {rep['sim_tau_after']} "
             f"(supervised/s ratio vs sequential: {rep['supervised_per_s_ratio_vs_sequential']})")
        for name, sel in rep["selected"].items():
            _log(f"kept state {name}: step {sel['best_step']} by {sel['selected_by']}"
                 + (" (the initialisation: SpecOPD did not change it)" if sel["is_initialisation"] else ""))
