"""Recipe of the corrector stage: every variant of `corrector.variants` co-trained from its base drafter,
then the `dflash-long` control (the base drafter alone, as many steps as the main co-training run).

Per variant (`draftlab.corrector.variants`: family, ablation, base drafter, frozen or not): build the
corrector, co-train it with the drafter (`draftlab.training.cotrain.train_corrector`, resumable under
`runs/<key>`), evaluate every path rule on the held-out set (`draftlab.training.corrector_eval`),
and measure the corrector's share of a real speculative round (`draftlab.bench.share`). The report
holds corrected vs uncorrected vs oracle simulated τ per variant, per slot and per rule.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from draftlab.bench.share import proposal_share
from draftlab.config import CorrectorConfig, PretrainConfig
from draftlab.corrector.base import Corrector
from draftlab.corrector.families import build_corrector
from draftlab.corrector.proposal import CorrectorProposal
from draftlab.corrector.variants import RULES, TABLE
from draftlab.drafter.checkpoint import load_drafter
from draftlab.drafter.model import DFlashDrafter
from draftlab.errors import DraftlabError
from draftlab.pipeline.common import file_digest, history_at, open_features, run_key
from draftlab.training.corrector_eval import evaluate_rules
from draftlab.training.cotrain import train_corrector
from draftlab.training.features import SequenceSet
from draftlab.training.fit import TrainResult
from draftlab.training.pretrain import train_drafter


@dataclass
class VariantOutcome:
    variant: str
    drafter: DFlashDrafter
    corrector: Corrector
    result: TrainResult
    report: dict


@dataclass
class CoTrainOutcome:
    variants: dict[str, VariantOutcome] = field(default_factory=dict)
    control: DFlashDrafter | None = None
    control_result: TrainResult | None = None
    report: dict = field(default_factory=dict)


def cotrain_from_references(target, df, ccfg: CorrectorConfig, pcfg: PretrainConfig, base_drafters: dict[str, str | Path],
                            work_root: str | Path, feature_roots: list[Path] | None = None,
                            logger_for: Callable[[str], object] | None = None, log: Callable[[str], None] = print,
                            share_prompts: int = 2, share_max_new_tokens: int = 32) -> CoTrainOutcome:
    """references -> every variant of `ccfg.variants` co-trained from its base drafter
    (`base_drafters`: 'pretrained' and, for specopd-dcoco, 'specopd' -> checkpoint folder), then the
    dflash-long control. `logger_for(name)` gives a Lightning logger per run (or None)."""
    work_root = Path(work_root)
    if not ccfg.variants:
        raise DraftlabError("corrector.variants is empty; name at least one of dcoco, nopair, nocand, frozen, "
                            "dspark, domino, dflash2")
    seqs = SequenceSet.from_dataframe(df)
    if not seqs.indices("train"):
        raise DraftlabError("the references have no split=='train' sequences to co-train on")
    base_of = lambda v: base_drafters[TABLE[v].base]  # noqa: E731
    for v in ccfg.variants:
        if not (Path(base_of(v)) / "config.json").exists():
            raise DraftlabError(f"base drafter {base_of(v)} of variant {v} not found; run the stage that writes it first")
    probe = load_drafter(base_of(ccfg.variants[0]), target)
    taps = probe.target_layer_ids
    store, fstats = None, {}
    if pcfg.cache_features:
        store, fstats = open_features(list(feature_roots or []) + [work_root / "features"], target, seqs, taps,
                                      pcfg.feature_batch_tokens, log)
    on_fly = None if store is not None else target
    held = seqs.indices("heldout") or seqs.indices("train")
    share_set = [seqs.seq(i)[: int(seqs.prompt_len[i])].tolist() for i in held[:share_prompts]]
    out = CoTrainOutcome()
    ckeys = {k: v for k, v in asdict(ccfg).items() if k not in ("variants", "control", "kernels", "base_drafter",
                                                                "specopd_drafter")}
    seq_keys = ("seq_rank", "seq_gate")  # only in the sequential variants' run keys (DCOCO's stay as they were)
    main = "dcoco" if "dcoco" in ccfg.variants else ccfg.variants[0]
    for v in ccfg.variants:
        # the sequential baselines get DCOCO's own budget (their comparison is the paper's, SPEC §2.4)
        sequential = TABLE[v].sequential
        full = v == main or sequential or not ccfg.variant_max_minutes
        minutes = ccfg.max_minutes if full else ccfg.variant_max_minutes
        drafter = load_drafter(base_of(v), target).train()
        k = min(ccfg.k, drafter.arch.draft_vocab_size or drafter.arch.target_vocab_size)
        view = ccfg.run_settings(pcfg, minutes, k=k)
        frozen = TABLE[v].frozen or ccfg.frozen_backbone
        corrector = build_corrector(ccfg, drafter, v).train()
        backend = None if ccfg.kernels == "auto" else ccfg.kernels
        rule = "greedy" if sequential else ccfg.path_rule  # a sequential walk has no other path rule
        rules = (rule,) if sequential else (rule, *[r for r in RULES if r != rule])
        if v == main:  # the base drafter before co-training (the fresh corrector reproduces its argmax)
            ev0 = evaluate_rules(drafter, corrector, seqs, view, k, ccfg.lam, "heldout", store, on_fly, ("greedy",), backend)
            out.report["sim_tau_base_drafter"] = ev0.get("sim_tau_uncorrected")
        vkeys = ckeys if sequential else {kk: vv for kk, vv in ckeys.items() if kk not in seq_keys}
        key = run_key(seqs.fingerprint(), file_digest(Path(base_of(v))), v, frozen, vkeys, minutes,
                      {kk: vv for kk, vv in asdict(view).items() if kk not in ("resume", "checkpoint_every")})
        log(f"corrector: {v} ({'frozen backbone' if frozen else 'co-training'}, {minutes:g} min / "
            f"{view.max_steps or '-'} steps, K={k}, corrector {corrector.num_parameters():,} parameters)")
        res = train_corrector(drafter, corrector, seqs, view, ccfg, work_root / "runs" / key, store, on_fly, frozen,
                              rule, logger_for(v) if logger_for else None, log=log)
        drafter.eval(), corrector.eval()
        ev = evaluate_rules(drafter, corrector, seqs, view, k, ccfg.lam, "heldout", store, on_fly, rules, backend)
        share = proposal_share(target, drafter, CorrectorProposal(corrector, rule, ccfg.lam, backend), share_set,
                               share_max_new_tokens) if share_set else {}
        best = res.best_metrics
        primary = "heldout" if "heldout" in best else next(iter(best))
        p = best[primary]
        rep = {
            "variant": v, "base_drafter": str(base_of(v)), "frozen_backbone": frozen, "path_rule": rule, "k": k,
            "sim_tau": p["sim_tau"], "sim_tau_uncorrected": p["sim_tau_uncorrected"], "sim_tau_oracle": p["sim_tau_oracle"],
            "sim_tau_gain": p["sim_tau"] - p["sim_tau_uncorrected"], "headroom_closed": p["headroom_closed"],
            "sim_tau_split": primary, "sim_tau_per_slot": p["sim_tau_per_slot"],
            "sim_tau_per_slot_uncorrected": p["sim_tau_per_slot_uncorrected"],
            "sim_tau_per_slot_oracle": p["sim_tau_per_slot_oracle"],
            "slot_acc_uncorrected": p["slot_acc"], "slot_acc_corrected": p["slot_acc_corrected"],
            f"top{k}_cov": p[f"top{k}_cov"],
            "rules": {r: ev.get(f"sim_tau_{r}") for r in rules} if ev else {},
            "per_set": {name: {"sim_tau": r["sim_tau"], "sim_tau_uncorrected": r["sim_tau_uncorrected"],
                               "sim_tau_oracle": r["sim_tau_oracle"], "blocks": r["blocks"]} for name, r in best.items()},
            "params_corrector": corrector.num_parameters(), "params_corrector_breakdown": corrector.parameter_breakdown(),
            "params_drafter_trained": 0 if frozen else drafter.num_trainable_parameters(),
            "steps": res.steps, "best_step": res.best_step, "train_minutes": res.train_seconds / 60.0,
            "best_train_minutes": res.best_train_minutes, "wall_s": res.wall_s, "budget_minutes": minutes,
            "resumed_from_step": res.resumed_from_step,
            "supervised_transition_frac": res.extras["supervised_transition_frac"],
            "proposal_share_of_round": share.get("proposal_share_of_round"), "engine": share,
            "history": res.history,
        }
        out.variants[v] = VariantOutcome(v, drafter, corrector, res, rep)
        log(f"corrector: {v} held-out sim τ {p['sim_tau']:.3f} corrected vs {p['sim_tau_uncorrected']:.3f} uncorrected "
            f"(oracle {p['sim_tau_oracle']:.3f}), {res.steps} steps in {res.train_seconds / 60:.1f} min")
    # ablations trained on a shorter schedule are also compared with dcoco at the same training minutes
    if main in out.variants:
        hist = out.variants[main].result.history
        for v, o in out.variants.items():
            if v != main:
                o.report["main_sim_tau_at_same_minutes"] = history_at(hist, o.report["train_minutes"])
    if ccfg.control and main in out.variants:
        steps = max(out.variants[main].result.steps, 1)
        drafter = load_drafter(base_drafters["pretrained"], target).train()
        view = ccfg.run_settings(pcfg, 0.0, max_steps=steps, k=pcfg.topk)
        key = run_key(seqs.fingerprint(), file_digest(Path(base_drafters["pretrained"])), "dflash-long",
                      {kk: vv for kk, vv in asdict(view).items() if kk not in ("resume", "checkpoint_every")})
        log(f"corrector: dflash-long control ({steps} steps of the drafter alone)")
        res = train_drafter(drafter, seqs, view, work_root / "runs" / key, store=store, target=on_fly,
                            logger=logger_for("dflash-long") if logger_for else None, log=log)
        drafter.eval()
        best = res.best_metrics
        primary = "heldout" if "heldout" in best else next(iter(best))
        out.control, out.control_result = drafter, res
        out.report["dflash-long"] = {"sim_tau": best[primary]["sim_tau"], "sim_tau_split": primary,
                                     "sim_tau_per_slot": best[primary]["sim_tau_per_slot"], "steps": res.steps,
                                     "best_step": res.best_step, "train_minutes": res.train_seconds / 60.0,
                                     "wall_s": res.wall_s}
    out.report.update({"variants": {v: o.report for v, o in out.variants.items()}, **fstats})
    base = out.variants[main].report if main in out.variants else None
    if base is not None:
        out.report["summary"] = {
            "main": main, "sim_tau_dcoco": base["sim_tau"], "sim_tau_base_drafter": out.report.get("sim_tau_base_drafter"),
            "sim_tau_uncorrected": base["sim_tau_uncorrected"], "sim_tau_oracle": base["sim_tau_oracle"],
            "sim_tau_ratio": base["sim_tau"] / base["sim_tau_uncorrected"] if base["sim_tau_uncorrected"] else None,
            "sim_tau_dflash_long": out.report.get("dflash-long", {}).get("sim_tau"),
        }
    return out
