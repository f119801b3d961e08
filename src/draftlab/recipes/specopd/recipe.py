"""Recipe of the specopd stage: SpecOPD and its baseline objectives from the pretrained drafter + report.

Every objective trains from the same pretrained drafter on the same references for the same number of
updates (`draftlab.recipes.specopd.module.train_objective`, resumable under `runs/<key>/<objective>`); the
report compares greedy simulated τ before/after, the held-out T=1 acceptance (the E2E-TV surrogate),
supervised positions/s and per branch vs the sequential Draft-OPD loop and the first-rejection ablation,
and packed vs independent scoring cost. SpecOPD keeps two states, selected by the metric each deployment
uses (`selected`): t0 by greedy simulated τ, t1 by the T=1 surrogate (each says whether it is the
initialisation).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from draftlab.config import SpecOPDConfig
from draftlab.drafter.checkpoint import load_drafter
from draftlab.drafter.model import DFlashDrafter
from draftlab.errors import DraftlabError
from draftlab.recipes.common import file_digest, run_key
from draftlab.specopd.cost import measure_scoring, paper_cost_model
from draftlab.training.features import FeatureStore, SequenceSet
from draftlab.recipes.specopd.module import ObjectiveResult, heldout_tv, train_objective


@dataclass
class SpecOPDOutcome:
    drafter: DFlashDrafter  # the SpecOPD objective's best state by greedy simulated τ (the T=0 arms' drafter)
    report: dict
    curve: list[dict]  # (step, train_minutes, sim τ per set) of the SpecOPD objective
    objectives: dict[str, ObjectiveResult]
    drafter_t1: DFlashDrafter | None = None  # its best state by the T=1 surrogate (the T=1 arms' drafter)

    def states(self) -> dict[str, tuple[DFlashDrafter, dict]]:
        """{'t0': (drafter, selection), 't1': ...}: the kept states and how each was selected."""
        sel = self.report["selected"]
        return {k: (d, sel[k]) for k, d in (("t0", self.drafter), ("t1", self.drafter_t1)) if d is not None}


def specopd_from_references(target, df, scfg: SpecOPDConfig, base_drafter: str | Path, work_root: str | Path,
                            feature_root: str | Path | None = None, logger=None,
                            log: Callable[[str], None] = print) -> SpecOPDOutcome:
    """references -> SpecOPD drafter + comparison report. `feature_root` is where the pretraining stage
    cached tap features (reused when the key matches; `scfg.cache_features=false`: no cache, the taps are
    computed in each step); runs resume under work_root/runs/<key>/<objective>."""
    work_root = Path(work_root)
    seqs = SequenceSet.from_dataframe(df)
    d0 = load_drafter(base_drafter, target)
    S = d0.block_size
    W = scfg.branch_width or S - 1
    if W > S - 1:
        raise DraftlabError(f"specopd.branch_width={W} exceeds the drafter's {S - 1} proposals per block "
                            f"(block size {S}); use at most {S - 1} or 0 (= block size − 1)")
    store = None  # cache_features=false: validation and the CE arm compute the taps in the step (no disk cache)
    if scfg.cache_features:
        store, _ = FeatureStore.open_or_build(Path(feature_root or work_root / "features"), target, seqs,
                                              d0.target_layer_ids, log=log)
    # memory settings (the cache, chunk sizes) are not part of a run's identity: a run resumes across them
    train_keys = {k: v for k, v in asdict(scfg).items() if k not in ("resume", "checkpoint_every", "checkpoint_seconds",
                                                                     "baselines",
                                                                     "cost_anchors", "cost_sequences", "tv_eval_seqs",
                                                                     "cache_features", "chunk_rows", "vocab_chunk",
                                                                     "train_attention")}
    key = run_key(seqs.fingerprint(), file_digest(Path(base_drafter)), train_keys)
    objectives = ["specopd"] + [a for a in scfg.baselines if a != "specopd"]
    results: dict[str, ObjectiveResult] = {}
    best_drafter = None
    for obj in objectives:
        d = load_drafter(base_drafter, target).train()
        steps = scfg.max_steps if obj == "specopd" else (scfg.baseline_max_steps or scfg.max_steps)
        results[obj] = train_objective(d, seqs, scfg, obj, work_root / "runs" / key / obj, target, store, steps,
                                       scfg.max_minutes, validate_first=obj == "specopd",
                                       logger=logger if obj == "specopd" else None, log=log,
                                       select_t1=obj == "specopd")
        if obj == "specopd":
            best_drafter = d
        else:
            del d
    main = results["specopd"]
    # the shared initialisation at T=1: SpecOPD's step-0 evaluation (it validates first), else measured here
    first = main.tv_history[0] if main.tv_history and main.tv_history[0]["step"] == 0 else None
    tv_before = {k: v for k, v in first.items() if k != "step"} if first else heldout_tv(d0, target, seqs, scfg, W)
    drafter_t1 = None
    if main.t1_state is not None:
        drafter_t1 = load_drafter(base_drafter, target)
        drafter_t1.load_state_dict(main.t1_state)
    primary = "heldout" if "heldout" in main.final else next(iter(main.final))
    before = main.before or {}
    tau = lambda res, name: (res or {}).get(name, {}).get("sim_tau")  # noqa: E731
    rows = {a: {"steps": r.steps, "sim_tau_final": tau(r.final, primary), "sim_tau_best": r.best_sim_tau,
                    "best_step": r.best_step, "per_set_final": {k: v["sim_tau"] for k, v in r.final.items()},
                    "supervised_positions": r.supervised_positions, "supervised_per_s": r.supervised_per_s,
                    "train_minutes": r.train_seconds / 60.0, "last_loss": r.last_terms.get("loss"),
                    "last_mean_alpha": r.last_terms.get("mean_alpha"), "resumed_from_step": r.resumed_from_step,
                    "tv_final": r.tv_final, "tau_t1_surrogate_final": r.tv_final.get("tau_t1_surrogate"),
                    "supervised_per_branch": r.supervised_per_branch}
                for a, r in results.items()}
    seq_rate = results["sequential"].supervised_per_s if "sequential" in results else None
    cost = {}
    if scfg.cost_anchors and scfg.cost_sequences:
        idx = seqs.indices("heldout")[: scfg.cost_sequences] or seqs.indices("train")[: scfg.cost_sequences]
        cost = measure_scoring(target, [seqs.seq(i).tolist() for i in idx], [int(seqs.prompt_len[i]) for i in idx],
                               scfg.cost_anchors, W, scfg.seed)
    report = {
        "sim_tau_split": primary,
        "sim_tau_before": tau(before, primary),
        "sim_tau_after": main.best.get(primary, {}).get("sim_tau"),  # the saved (best) state
        "sim_tau_after_final": tau(main.final, primary),
        "sim_tau_gain_pct": None,
        "per_set_before": {k: v.get("sim_tau") for k, v in before.items()},
        "per_set_after": {k: v["sim_tau"] for k, v in main.best.items()},
        "best_step": main.best_step, "steps": main.steps,
        "baselines": {a: row for a, row in rows.items() if a != "specopd"},
        "specopd": rows["specopd"],
        "supervised_per_s": main.supervised_per_s,
        "supervised_per_s_sequential": seq_rate,
        "supervised_per_s_ratio_vs_sequential": (main.supervised_per_s / seq_rate) if seq_rate else None,
        "tv_before": tv_before, "tau_t1_surrogate_before": tv_before.get("tau_t1_surrogate"),
        "tau_t1_surrogate_final": main.tv_final.get("tau_t1_surrogate"),
        "selected": selected_states(main, primary),
        "scoring_cost": cost,
        "scoring_cost_paper_example": paper_cost_model(),
        "branch_width": W, "anchors_per_seq": scfg.anchors_per_seq, "batch_size": scfg.batch_size,
        "temperature": scfg.temperature, "block_size": S, "draft_vocab_size": d0.arch.draft_vocab_size,
    }
    if report["sim_tau_before"] and report["sim_tau_after"]:
        report["sim_tau_gain_pct"] = 100.0 * (report["sim_tau_after"] / report["sim_tau_before"] - 1.0)
    names = sorted({k for row in main.history for k in row} - {"step", "train_minutes"})
    curve = [{"step": r["step"], "train_minutes": r["train_minutes"], **{n: r.get(n) for n in names}} for r in main.history]
    return SpecOPDOutcome(best_drafter, report, curve, results, drafter_t1)


def selected_states(main: ObjectiveResult, primary: str) -> dict:
    """The two kept states of the SpecOPD objective: t0 = best by held-out greedy simulated τ (what T=0
    decoding uses), t1 = best by the held-out T=1 surrogate (what T=1 decoding uses); each with its step,
    both figures and whether it is SpecOPD's initialisation (step 0: SpecOPD did not change it)."""
    tv_at = {r["step"]: r.get("tau_t1_surrogate") for r in main.tv_history}
    sim_at = {r["step"]: r.get(primary) for r in main.history}
    out = {"t0": {"selected_by": "greedy simulated τ (held-out)", "best_step": main.best_step,
                  "sim_tau": main.best.get(primary, {}).get("sim_tau"), "tau_t1_surrogate": tv_at.get(main.best_step)}}
    if main.best_t1 is not None:
        s1 = main.best_t1["step"]
        out["t1"] = {"selected_by": "T=1 surrogate τ (held-out)", "best_step": s1,
                     "sim_tau": main.best_t1.get("sim_tau", sim_at.get(s1)), "tau_t1_surrogate": main.best_t1["tau_t1_surrogate"]}
    for st in out.values():
        st["is_initialisation"] = st["best_step"] == 0
    return out
