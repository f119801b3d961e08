"""Stage corrector: DCOCO co-training of drafter + corrector from a base drafter (docs/algorithms.md
"DCOCO"), its ablation variants, the sequential baselines dspark / domino and DFlash-2's selector ("Baselines and
controls") and the dflash-long control.

Reads models/target, data/references.parquet and the base drafter (`corrector.base_drafter`,
default models/drafter/pretrained; models/drafter/seeded when `seeded.methods`: the arms are then
`dcoco-seeded`, ...; the dflash-long control continues the same base, and the report and every saved folder's
`info` record which: `base_kind`, `base_folder`; for the composed variants the specopd stage's folder
`corrector.specopd_drafter`: specopd-dcoco-t1 starts from its t1/ state (best T=1 acceptance, the T=1
arm), specopd-dcoco from its t0/ state (best greedy τ, the T=0 arm) — or from t1/ when t0/ is SpecOPD's
initialisation, so that it builds on a drafter SpecOPD changed; the two runs are then one). Writes, per variant of `corrector.variants`,
models/corrector/<variant>/drafter/ and models/corrector/<variant>/corrector/ (each config.json +
model.safetensors, self-describing), the control models/drafter/long/ (when `corrector.control`),
results/corrector.json (per variant: the drafter's own held-out τ before / after, the corrected τ, the
top-K and the reachable oracle and the headroom closed against each, per slot, per path rule, parameter
counts, training time; a corrector's share of a real round is the benchmark's), the headline metrics/corrector/<variant>.json
(simulated τ corrected / uncorrected / top-K oracle) and one MLflow run. The feature cache is
shared with pretrain_drafter when it matches; resumable runs live under checkpoints/corrector/.
The recipe is draftlab.recipes.corrector; this module only loads, wires and writes.
"""
from __future__ import annotations

from pathlib import Path

from draftlab import paths
from draftlab.pipeline.stage import (load_inputs, pick, require_references, stage_log, training_run,
    write_report)

OUT = Path(paths.CORRECTORS)
CONTROL = Path(paths.LONG_DRAFTER)
# the report: results/corrector.json; headline: metrics/corrector/<variant>.json (one DVC metrics row each)
CORRECTOR_HEADLINE = {"sim_tau": "sim_tau", "sim_tau_uncorrected": "sim_tau_uncorrected", "sim_tau_oracle": "sim_tau_oracle"}
WORK = Path(paths.work("corrector"))
PRETRAIN_FEATURES = Path(paths.PRETRAIN_FEATURES)  # reused when it matches


_log = stage_log("corrector")


def run(params) -> None:
    from draftlab.drafter.checkpoint import save_drafter
    from draftlab.pipeline.layout import method_base
    from draftlab.tracking import lightning_logger
    from draftlab.training.dist import is_rank_zero
    from draftlab.recipes.corrector.recipe import CotrainPaths, cotrain_from_references, specopd_bases

    t, c = params.target, params.corrector
    require_references()
    base = method_base(params.seeded.methods, c.base_drafter)
    base.check()
    specopd, choice = specopd_bases(c.specopd_drafter)
    check_specopd_base(specopd, base, c.variants)
    target, df = load_inputs(params)
    _log(f"training on the {base.kind} drafter {base.folder}")
    with training_run("corrector", params, ("target", "profile", "corrector", "pretrain", "seeded")) as mlrun:
        def logger_for(name: str):  # one MLflow run, one metric namespace per trained variant
            return lightning_logger(mlrun, params.tracking.experiment, prefix=name)

        # "pretrained" is the variants' name for the stage's own base (corrector.variants.BASES): the method base here
        where = CotrainPaths({"pretrained": base.folder, **specopd}, WORK, (PRETRAIN_FEATURES,))
        out = cotrain_from_references(target, df, c, params.pretrain, where, logger_for=logger_for, log=_log)
        if not is_rank_zero():  # DDP: the other ranks trained their shares; rank 0 writes the outputs
            return
        out.report["specopd_base_choice"] = choice
        out.report.update(base.record())
        info = {"stage": "corrector", "profile": params.profile.name, "target": t.name, **base.record()}
        save_variants(out.variants, OUT, info, c.kernels)
        if out.control is not None:
            save_drafter(out.control, CONTROL, info={**info, "variant": "dflash-long",
                                                     "sim_tau": out.report["dflash-long"]["sim_tau"]})
        report = {**out.report, "target": t.name, "profile": params.profile.name}
        rows = {v: pick(r, CORRECTOR_HEADLINE) for v, r in out.report["variants"].items()}
        if "dflash-long" in out.report:
            rows["dflash-long"] = pick(out.report["dflash-long"], CORRECTOR_HEADLINE)
        paths = write_report("corrector", report, rows)
        flat = {f"{v}/{k}": x for v, r in out.report["variants"].items() for k, x in r.items()
                if isinstance(x, (int, float)) and not isinstance(x, bool)}
        mlrun.log_metrics({**flat, **{f"summary/{k}": x for k, x in out.report.get("summary", {}).items()
                                      if isinstance(x, (int, float)) and not isinstance(x, bool)}})
        for p in paths:
            mlrun.log_artifact(p)
        for v, r in out.report["variants"].items():
            before = r["drafter_tau_before"]
            _log(f"{v}: sim tau {r['sim_tau']:.3f} (drafter {'-' if before is None else f'{before:.3f}'} -> "
                 f"{r['sim_tau_uncorrected']:.3f}, "
                 f"oracles {r['sim_tau_oracle']:.3f} / reachable {r['sim_tau_oracle_reachable']:.3f})")


def save_variants(variants: dict, root: Path, info: dict, kernels: str) -> None:
    """Each co-trained variant as the arms read it: <root>/<variant>/drafter and <root>/<variant>/corrector, their
    `info` carrying `info` (stage, profile, target, base) and the decode-time rules (path rule, λ, kernels, K)."""
    from draftlab.drafter.checkpoint import save_drafter

    for v, o in variants.items():
        rules = {"path_rule": o.report["path_rule"], "lam": o.lam, "kernels": kernels, "k": o.report["k"]}
        save_drafter(o.drafter, root / v / "drafter", info={**info, "variant": v, "sim_tau_uncorrected":
                                                             o.report["sim_tau_uncorrected"]})
        o.corrector.save(root / v / "corrector", info={**info, **rules, "variant": v, "sim_tau": o.report["sim_tau"]})


def check_specopd_base(specopd: dict[str, str], base, variants: list[str]) -> None:
    """The SpecOPD states the composed variants start from were trained on the same base drafter as this stage's
    (both stages follow seeded.methods; a stale specopd output is one line)."""
    from pathlib import Path

    from draftlab.drafter.checkpoint import trained_base
    from draftlab.corrector.families import variant_table
    from draftlab.errors import DraftlabError

    table = variant_table()
    for key in sorted({table[v].base for v in variants} & set(specopd)):
        folder = specopd[key]
        if (Path(folder) / "config.json").exists():
            got = trained_base(folder)
            if got != base.kind:
                raise DraftlabError(f"{folder} (SpecOPD's state for the {key} variants) was trained on the {got} drafter, "
                                    f"but this stage trains on the {base.kind} one ({base.folder}); re-run the specopd "
                                    f"stage (dvc repro specopd)")
