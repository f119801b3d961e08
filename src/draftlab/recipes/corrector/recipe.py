"""Recipe of the corrector stage: every variant of `corrector.variants` co-trained from its base drafter,
then the `dflash-long` control (the base drafter alone, as many steps as the main co-training run).

Per variant (`draftlab.corrector.variants`: family, ablation, base drafter, frozen or not, how the
corrector loss reaches the drafter, loss kind): measure the base drafter's own held-out τ (once per
base), build the corrector and co-train it with the drafter (`draftlab.recipes.corrector.cotrain.train_corrector`,
resumable under `runs/<key>`; every validation scores every path rule). What a corrector costs in a real round is the
benchmark's to measure (`proposal_share_of_round` per arm in results/benchmark.json), not training's. The report holds, per variant: the drafter's own τ before / after, the
corrected τ, the top-K and the reachable oracle with the headroom closed against each, per slot, per
rule; variants on a shorter budget also get dcoco's corrected and drafter τ at the same minutes.
Budgets (`variant_view`): the main variant and the families whose record says `budget="main"` (the sequential
baselines) train on the section's budget, the rest on `corrector.variant_max_minutes` and
`corrector.variant_budget_fraction` of its steps and epochs; a variant in `corrector.variant_steps` on that many updates
alone. Nothing here names a family: each variant's family record
(`draftlab.corrector.families`) builds its corrector, gives its path rules and its settings.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable

from draftlab.config import CorrectorConfig, PretrainConfig
from draftlab.corrector.base import Corrector
from draftlab.corrector.families import build_corrector, family_of, variant_table
from draftlab.corrector.variants import Variant
from draftlab.drafter.checkpoint import load_drafter, read_arch
from draftlab.drafter.model import DFlashDrafter
from draftlab.errors import DraftlabError
from draftlab.recipes.common import file_digest, history_at, run_key
from draftlab.recipes.corrector.evaluate import evaluate_rules
from draftlab.recipes.corrector.cotrain import CoTrainRun, train_corrector
from draftlab.training.features import FeatureStore, SequenceSet
from draftlab.training.fit import TrainResult
from draftlab.training.pretrain import train_drafter

# run settings that do not change what a run trains (memory and kernel choices): not part of its run key
NOT_IDENTITY = ("resume", "checkpoint_every", "checkpoint_seconds", "chunk_rows", "train_attention")


@dataclass
class VariantOutcome:
    variant: str
    drafter: DFlashDrafter
    corrector: Corrector
    result: TrainResult
    report: dict
    lam: float = 0.75  # the geometric rule's λ the corrector decodes with (its family's setting)


@dataclass
class CoTrainOutcome:
    variants: dict[str, VariantOutcome] = field(default_factory=dict)
    control: DFlashDrafter | None = None
    control_result: TrainResult | None = None
    report: dict = field(default_factory=dict)


@dataclass(frozen=True)
class CotrainPaths:
    """The folders co-training reads and writes: each base drafter ('pretrained', 'specopd' (SpecOPD's best greedy
    state), 'specopd-t1' (its best T=1 state) -> checkpoint folder), the root of its resumable runs, and the
    tap-feature caches it reuses before its own."""

    bases: dict[str, str | Path]
    work: Path
    features: tuple[Path, ...] = ()


def cotrain_from_references(target, df, ccfg: CorrectorConfig, pcfg: PretrainConfig, where: CotrainPaths,
                            logger_for: Callable[[str], object] | None = None,
                            log: Callable[[str], None] = print) -> CoTrainOutcome:
    """references -> every variant of `ccfg.variants` co-trained from its base drafter (`where.bases`), then the
    dflash-long control. `logger_for(name)` gives a Lightning logger per run (or None). The steps: check the inputs,
    open the tap-feature cache, co-train each variant (its base drafter evaluated once before), compare the shorter
    runs with the main one at equal minutes, train the control, summarise."""
    work_root, base_drafters = Path(where.work), where.bases
    seqs = _checked_references(df, ccfg, base_drafters)
    table = variant_table()
    base_of = lambda v: base_drafters[table[v].base]  # noqa: E731
    taps = load_drafter(base_of(ccfg.variants[0]), target).target_layer_ids
    store, fstats = None, {}
    if pcfg.cache_features:
        store, fstats = FeatureStore.open_or_build(work_root / "features", target, seqs, taps,
                                                   pcfg.feature_batch_tokens, log=log, reuse=where.features)
    on_fly = None if store is not None else target
    out = CoTrainOutcome()
    # the budget settings enter each key as the variant's resolved budget (minutes, the view's steps and epochs)
    ckeys = {k: v for k, v in asdict(ccfg).items() if k not in ("variants", "control", "kernels", "base_drafter",
                                                                "specopd_drafter", "variant_budget_fraction",
                                                                "families", "family_modules", "variant_steps")}
    main = ccfg.main_variant
    backend = None if ccfg.kernels == "auto" else ccfg.kernels
    before: dict[str, dict] = {}  # base -> the base drafter's own held-out τ before co-training
    for v in ccfg.variants:
        row = table[v].resolve(ccfg.grad_hidden, ccfg.grad_logits, ccfg.frozen_warmup)
        fam = family_of(v)
        section = fam.section(ccfg)  # the family's own settings
        lam = fam.lam(section)
        drafter = load_drafter(base_of(v), target).train()
        k = min(ccfg.k, drafter.arch.draft_vocab_size or drafter.arch.target_vocab_size)
        role, view = variant_view(ccfg, pcfg, v, main, k)
        minutes = view.max_minutes
        if v != main:  # only the main run validates on the way (dcoco at its ablations' budget); the rest at their end
            view = replace(view, val_every=0)
        frozen = row.frozen or ccfg.frozen_backbone
        corrector = build_corrector(ccfg, drafter, v).train()
        rules = fam.rules(section)  # the family's path rules, the one it decodes with first
        rule = rules[0]
        if row.base not in before:  # the base drafter before co-training (the fresh corrector reproduces its argmax)
            same = next((b for b in before if base_drafters[b] == base_of(v)), None)  # one folder, one evaluation
            if same is None:
                ev0 = evaluate_rules(drafter, corrector, seqs, view, k, lam, "heldout", store, on_fly, ("greedy",),
                                     backend)
            before[row.base] = dict(before[same]) if same else {
                "sim_tau": ev0.get("sim_tau_uncorrected"), "se": ev0.get("sim_tau_se_uncorrected"), **base_state(base_of(v))}
        vkeys = {**ckeys, "family": fam.name, **asdict(section)}  # the shared settings and the family's own
        # the key names what is trained, not the row's name: two rows that train the same thing share one run
        key = run_key(seqs.fingerprint(), file_digest(Path(base_of(v))), frozen, vkeys, minutes,
                      {kk: vv for kk, vv in asdict(view).items() if kk not in NOT_IDENTITY},
                      {kk: vv for kk, vv in asdict(row).items() if kk not in ("name", "base")})
        log(f"corrector: {v} ({mode_text(row, frozen)}; {role} budget {minutes:g} min / {view.max_steps or '-'} "
            f"steps / {view.epochs:g} epochs, K={k}, "
            f"corrector {corrector.num_parameters():,} parameters)")
        run = CoTrainRun(view, ccfg, work_root / "runs" / key, row, frozen, rule, tuple(rules), lam)
        res = train_corrector(drafter, corrector, seqs, run, store, on_fly, logger_for(v) if logger_for else None, log=log)
        drafter.eval(), corrector.eval()
        rep = variant_report(row, str(base_of(v)), before[row.base], drafter, corrector, res,
                             {"frozen_backbone": frozen, "path_rule": rule, "k": k, "rules": rules, "role": role,
                              "minutes": minutes, "view": view})
        out.variants[v] = VariantOutcome(v, drafter, corrector, res, rep, lam)
        b0 = before[row.base]
        log(f"corrector: {v} held-out sim τ {rep['sim_tau']:.3f} corrected; drafter {b0['sim_tau'] or float('nan'):.3f} -> "
            f"{rep['sim_tau_uncorrected']:.3f}; oracles {rep['sim_tau_oracle']:.3f} / reachable "
            f"{rep['sim_tau_oracle_reachable']:.3f}; {res.steps} steps in {res.train_seconds / 60:.1f} min")
    compare_at_main_minutes(out, main)
    if ccfg.control and main in out.variants:
        out.control, out.control_result, out.report["dflash-long"] = train_control(
            target, seqs, ccfg, pcfg, base_drafters["pretrained"], max(out.variants[main].result.steps, 1),
            work_root, store, on_fly, logger_for, log)
    out.report.update({"variants": {v: o.report for v, o in out.variants.items()}, "base_drafters": before, **fstats})
    out.report["sim_tau_base_drafter"] = before.get("pretrained", {}).get("sim_tau")
    if main in out.variants:
        out.report["summary"] = summary(out.variants[main].report, main, out.report)
    return out


def _checked_references(df, ccfg: CorrectorConfig, bases: dict[str, str | Path]) -> SequenceSet:
    """The references as sequences, after checking that there is something to train and every base drafter exists."""
    if not ccfg.variants:
        raise DraftlabError("corrector.variants is empty; name at least one of: " + ", ".join(variant_table()))
    seqs = SequenceSet.from_dataframe(df)
    if not seqs.indices("train"):
        raise DraftlabError("the references have no split=='train' sequences to co-train on")
    for v in ccfg.variants:
        family_of(v)  # an unknown variant is one line
        base = variant_table()[v].base
        if base not in bases or not (Path(bases[base]) / "config.json").exists():
            raise DraftlabError(f"base drafter {bases.get(base, base)} of variant {v} not "
                                f"found; run the stage that writes it first")
    return seqs


def variant_report(row: Variant, base_folder: str, b0: dict, drafter, corrector, res, run: dict) -> dict:
    """One variant's report: its settings (`run`: frozen_backbone, path_rule, k, rules, role, minutes, view), the
    drafter's own held-out τ before (`b0`) and after co-training beside the corrected τ and both oracles (at the
    best state), the per-slot and per-set figures, sizes and the budget."""
    best = res.best_metrics
    primary = "heldout" if "heldout" in best else next(iter(best))
    p = best[primary]
    frozen, k, minutes, view = run["frozen_backbone"], run["k"], run["minutes"], run["view"]
    return {
        "variant": row.name, "base": row.base, "base_drafter": base_folder, **{f"base_{kk}": vv for kk, vv in b0.items()
                                                                           if kk not in ("sim_tau", "se")},
        "frozen_backbone": frozen, "grad_hidden": row.grad_hidden, "grad_logits": row.grad_logits,
        "frozen_warmup": 0.0 if frozen else row.frozen_warmup, "loss": row.loss, "path_rule": run["path_rule"], "k": k,
        # the drafter's own held-out τ before / after co-training, beside the corrected τ and both oracles
        "drafter_tau_before": b0["sim_tau"], "drafter_tau_after": p["sim_tau_uncorrected"],
        "drafter_tau_change": (p["sim_tau_uncorrected"] - b0["sim_tau"]) if b0["sim_tau"] is not None else None,
        "sim_tau_se": p["sim_tau_se_uncorrected"],
        "sim_tau": p["sim_tau"], "sim_tau_uncorrected": p["sim_tau_uncorrected"], "sim_tau_oracle": p["sim_tau_oracle"],
        "sim_tau_oracle_reachable": p["sim_tau_oracle_reachable"],
        "sim_tau_gain": p["sim_tau"] - p["sim_tau_uncorrected"], "headroom_closed": p["headroom_closed"],
        "headroom_closed_reachable": p["headroom_closed_reachable"],
        # the headrooms' standard errors over blocks: a share is given only above NOISE_SE (5) of its error (stats.share_closed)
        "headroom_se": p.get("headroom_se"), "headroom_se_reachable": p.get("headroom_se_reachable"),
        "sim_tau_split": primary, "sim_tau_per_slot": p["sim_tau_per_slot"],
        "sim_tau_per_slot_uncorrected": p["sim_tau_per_slot_uncorrected"],
        "sim_tau_per_slot_oracle": p["sim_tau_per_slot_oracle"],
        "sim_tau_per_slot_oracle_reachable": p["sim_tau_per_slot_oracle_reachable"],
        "slot_acc_uncorrected": p["slot_acc"], "slot_acc_corrected": p["slot_acc_corrected"],
        f"top{k}_cov": p[f"top{k}_cov"],
        "rules": {r: p.get(f"sim_tau_{r}") for r in run["rules"]},
        "per_set": {name: {"sim_tau": r["sim_tau"], "sim_tau_uncorrected": r["sim_tau_uncorrected"],
                           "sim_tau_oracle": r["sim_tau_oracle"], "sim_tau_oracle_reachable": r["sim_tau_oracle_reachable"],
                           "blocks": r["blocks"]} for name, r in best.items()},
        "params_corrector": corrector.num_parameters(), "params_corrector_breakdown": corrector.parameter_breakdown(),
        "params_drafter_trained": 0 if frozen else drafter.num_trainable_parameters(),
        "steps": res.steps, "best_step": res.best_step, "train_minutes": res.train_seconds / 60.0,
        "best_train_minutes": res.best_train_minutes, "wall_s": res.wall_s, "budget_minutes": minutes,
        "budget": {"role": run["role"], "max_minutes": minutes, "max_steps": view.max_steps, "epochs": view.epochs},
        "resumed_from_step": res.resumed_from_step,
        "supervised_transition_frac": res.extras["supervised_transition_frac"],
        "history": res.history,
    }


def compare_at_main_minutes(out: CoTrainOutcome, main: str) -> None:
    """Variants trained on a shorter schedule are also compared with the main one at the same training minutes."""
    if main not in out.variants:
        return
    hist = out.variants[main].result.history
    for v, o in out.variants.items():
        if v != main:
            o.report["main_sim_tau_at_same_minutes"] = history_at(hist, o.report["train_minutes"])
            o.report["main_drafter_tau_at_same_minutes"] = history_at(hist, o.report["train_minutes"],
                                                                      "heldout_uncorrected")


def train_control(target, seqs: SequenceSet, ccfg: CorrectorConfig, pcfg: PretrainConfig, base: str | Path, steps: int,
                  work_root: Path, store, on_fly, logger_for, log) -> tuple:
    """The dflash-long control: the drafter alone from `base`, as many steps as the main variant -> (drafter,
    result, report)."""
    drafter = load_drafter(base, target).train()
    view = ccfg.run_settings(pcfg, 0.0, max_steps=steps, k=pcfg.topk)
    key = run_key(seqs.fingerprint(), file_digest(Path(base)), "dflash-long",
                  {kk: vv for kk, vv in asdict(view).items() if kk not in NOT_IDENTITY})
    log(f"corrector: dflash-long control ({steps} steps of the drafter alone)")
    res = train_drafter(drafter, seqs, view, work_root / "runs" / key, store=store, target=on_fly,
                        logger=logger_for("dflash-long") if logger_for else None, log=log)
    drafter.eval()
    best = res.best_metrics
    primary = "heldout" if "heldout" in best else next(iter(best))
    return drafter, res, {"sim_tau": best[primary]["sim_tau"], "sim_tau_split": primary,
                          "sim_tau_se": best[primary].get("sim_tau_se"),
                          "sim_tau_per_slot": best[primary]["sim_tau_per_slot"], "steps": res.steps,
                          "best_step": res.best_step, "train_minutes": res.train_seconds / 60.0, "wall_s": res.wall_s}


def summary(base: dict, main: str, report: dict) -> dict:
    """The headline of the stage: the main variant against its base drafter, its oracles and the control."""
    return {
        "main": main, "sim_tau_dcoco": base["sim_tau"], "sim_tau_base_drafter": report["sim_tau_base_drafter"],
        "sim_tau_uncorrected": base["sim_tau_uncorrected"], "sim_tau_oracle": base["sim_tau_oracle"],
        "sim_tau_oracle_reachable": base["sim_tau_oracle_reachable"],
        "headroom_closed": base["headroom_closed"], "headroom_closed_reachable": base["headroom_closed_reachable"],
        "sim_tau_ratio": base["sim_tau"] / base["sim_tau_uncorrected"] if base["sim_tau_uncorrected"] else None,
        "sim_tau_dflash_long": report.get("dflash-long", {}).get("sim_tau"),
    }


def variant_view(ccfg: CorrectorConfig, pcfg: PretrainConfig, v: str, main: str, k: int) -> tuple[str, PretrainConfig]:
    """The budget role of variant v ("main": the main variant and the variants of a family whose record says
    `budget="main"` — the sequential baselines, whose comparison with it is the paper's, docs/algorithms.md "DCOCO";
    "ablation": every other variant) and its run settings with that budget (`CorrectorConfig.variant_budget`)."""
    role = "main" if v == main or family_of(v).budget == "main" else "ablation"
    budget = ccfg.variant_budget(role == "main", v)
    return role, replace(ccfg.run_settings(pcfg, budget["max_minutes"], k=k), max_steps=budget["max_steps"],
                         epochs=budget["epochs"])


def specopd_bases(folder: str | Path) -> tuple[dict[str, str], dict]:
    """The base drafters of the composed variants from the specopd stage's folder: 'specopd-t1' = its t1/
    state (best T=1 surrogate); 'specopd' = its t0/ state (best greedy τ) when SpecOPD changed it, else the
    t1/ state, so that specopd-dcoco always builds on a drafter SpecOPD changed (when one exists). Also
    returns what was chosen and why (for the metrics)."""
    t0, t1 = Path(folder) / "t0", Path(folder) / "t1"
    bases = {"specopd": str(t0), "specopd-t1": str(t1)}
    note = {"specopd": "t0"}
    if (t0 / "config.json").exists() and base_state(t0).get("is_initialisation") and (t1 / "config.json").exists():
        bases["specopd"] = str(t1)
        note = {"specopd": "t1", "reason": "SpecOPD's best greedy-τ state (t0) is its initialisation; specopd-dcoco "
                                           "builds on its best T=1 state (t1) instead"}
    return bases, note


def base_state(folder: str | Path) -> dict:
    """What the base drafter's checkpoint says about itself: for SpecOPD's states, which metric selected it,
    at which step, and whether that is SpecOPD's initialisation (then SpecOPD did not change it)."""
    _, info = read_arch(folder)
    if "selected_by" not in info:  # not one of SpecOPD's kept states
        return {}
    return {k: info[k] for k in ("selected_by", "best_step", "is_initialisation") if k in info}


def mode_text(row: Variant, frozen: bool) -> str:
    """How a variant trains, in words (the stage log)."""
    if frozen:
        return f"frozen backbone, {row.loss} loss"
    return (f"co-training, corrector gradient into the drafter x{row.grad_hidden:g} via hidden states / "
            f"x{row.grad_logits:g} via logits" + (f", drafter frozen for the first {row.frozen_warmup:.0%}"
                                                  if row.frozen_warmup else "") + f", {row.loss} loss")
