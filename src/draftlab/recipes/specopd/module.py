"""SpecOPD training (docs/algorithms.md "SpecOPD") and the objectives it is compared with, each an objective of the one
training module (`SpecOPDObjective`).

Reused (not copied): the data module (`draftlab.training.data.DrafterDataModule`, handed SpecOPD's
items with branch anchors: `branch_data`), the one training module (budget clock, optimiser, schedule,
best-state keeping, resumable counters), pretraining's objective (its optimiser groups, simulated-τ validation against the target's
greedy tokens, and the off-policy CE arm's step),
the fit driver (`draftlab.training.fit.train`) and the tap-feature cache (`FeatureStore`, used for
validation and the CE arm when `specopd.cache_features`; otherwise those compute the taps in the step,
and training always takes its context taps from the trunk pass).

Objectives (same references, same number of updates, all starting from the pretrained drafter;
names in `draftlab.specopd.objectives`):
- `specopd`          on-policy branches after random response anchors, packed tree scoring, E2E-TV;
- `first_rejection`  the same, supervising only up to and including the first rejected position;
- `offpolicy_tv`     E2E-TV on the reference continuation;
- `offpolicy_ce`     pretraining's CE step (= continued pretraining);
- `sequential`       the Draft-OPD-style sequential loop (draft -> verify -> accepted prefix decides).
The E2E-TV numerator and branch count are summed across ranks before dividing (`distributed_loss`).
A seeded drafter trains with its seeds in every objective: the terms read its q through
`draftlab.specopd.slots` (seeded blocks, seed bias, seed column), the CE arm is pretraining's seeded step.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import lightning as L
import torch
from torch import Tensor

from draftlab.config import PretrainConfig
from draftlab.drafter.model import DFlashDrafter
from draftlab.errors import DraftlabError
from draftlab.specopd.objectives import OBJECTIVES
from draftlab.specopd.terms import Terms, draft_opd_terms, offpolicy_tv_terms, specopd_terms
from draftlab.specopd.tree import sample_branch_anchors
from draftlab.training.data import Collate, DrafterDataModule, TrainBlocks
from draftlab.training.features import FeatureStore, SequenceSet
from draftlab.training.ce import DrafterCE
from draftlab.training.fit import train
from draftlab.training.module import TrainModule
from draftlab.training.objective import StepContext, StepOut


# ---- data: pretraining's, with branch anchors ------------------------------------------------------------


class BranchBlocks(TrainBlocks):
    """Item = (sequence index, up to A random anchors in [P, L−2]): branches may be cut short by the
    end of the reference (W_b < W), unlike pretraining's full blocks."""

    def __getitem__(self, i: int):
        return i, sample_branch_anchors(int(self.seqs.lengths[i]), int(self.seqs.prompt_len[i]), self.A)


def branch_data(seqs: SequenceSet, cfg: PretrainConfig, block_size: int, store: FeatureStore | None,
                val_sets: list[str] | None = None, train_feats: bool = False) -> DrafterDataModule:
    """Pretraining's data module with SpecOPD's batches: training items carry branch anchors; `val_sets` limits
    validation to the named sets (heldout, eval suites; empty = all); `train_feats` gives training batches the
    cached tap features (the off-policy CE objective; the others take them from the trunk pass)."""
    return DrafterDataModule(seqs, cfg, block_size, store, train_sample=0, items=BranchBlocks, val_sets=val_sets,
                             train_collate=Collate(seqs, store if train_feats else None))


# ---- the objective --------------------------------------------------------------------------------------------


def distributed_loss(ctx: StepContext, numerator: Tensor, count: Tensor) -> tuple[Tensor, Tensor]:
    """(loss to backpropagate, its global value). Counts are summed over ranks before dividing; DDP's
    gradient averaging over R ranks then gives ∇ Σ_r num_r / Σ_r cnt_r exactly."""
    total = ctx.reduce(count.detach().float()).clamp(min=1)
    # a copy: the all-reduce works in place, and detach().float() of an fp32 tensor is the numerator's own storage
    value = ctx.reduce(numerator.detach().float().clone()) / total
    return numerator * ctx.world / total, value


class SpecOPDObjective:
    """One of SpecOPD's objectives (`OBJECTIVES`) as the training module drives it: the drafter's optimiser groups,
    schedule and simulated-τ validation are pretraining's (`DrafterCE`, which is also the `offpolicy_ce` arm's step);
    the step is the objective's terms. `tv_eval`: () -> the held-out T=1 evaluation of the current drafter, run at every
    validation with the best state by it kept (None: not selected on)."""

    def __init__(self, drafter: DFlashDrafter, cfg: PretrainConfig, target, objective: str = "specopd",
                 branch_width: int = 0, temperature: float = 1.0, rounds: int = 8, eos_ids: list[int] = (),
                 kernels: str = "auto", sample_seed: int = 0, tv_eval: Callable[[], dict] | None = None,
                 chunk_rows: int = 0, vocab_chunk: int = 0):
        if objective not in OBJECTIVES:
            raise DraftlabError(f"unknown SpecOPD objective {objective!r}; choose one of: {', '.join(OBJECTIVES)}")
        self.ce = DrafterCE(drafter, cfg, target, val_labels="greedy")
        self.drafter, self.cfg, self.target = drafter, cfg, target
        self.objective, self.temperature, self.rounds, self.eos_ids = objective, temperature, rounds, list(eos_ids)
        self.W = branch_width or drafter.block_size - 1
        self.backend = None if kernels == "auto" else kernels
        self.sample_seed = sample_seed
        self.chunk_rows, self.vocab_chunk = chunk_rows, vocab_chunk  # memory at scale (specopd.chunk_rows, vocab_chunk)
        self.last_terms: dict = {}
        self.branches_seen = 0  # branches (or rounds) supervised: positions per branch = slot_predictions / this
        self.tv_eval = tv_eval
        self.best_t1: dict | None = None  # the best state by the T=1 surrogate: step, figures, state
        self.tv_history: list[dict] = []  # (step, the T=1 evaluation) at every validation

    # ---- pretraining's: the drafter, its optimiser groups and schedule, its validation -------------------------
    def modules(self) -> dict:
        return self.ce.modules()

    def param_groups(self) -> list[dict]:
        return self.ce.param_groups()

    def lr_factor(self, group: dict, progress: float) -> float:
        return self.ce.lr_factor(group, progress)

    def new_val_stats(self):
        return self.ce.new_val_stats()

    def validate_batch(self, batch: dict, stats) -> None:
        self.ce.validate_batch(batch, stats)

    def val_summary(self, stats) -> dict:
        return self.ce.val_summary(stats)

    def snapshot(self) -> dict:
        return self.ce.snapshot()

    def restore(self, state: dict) -> None:
        self.ce.restore(state)

    def extras(self) -> dict:
        return {}

    # ---- the step ------------------------------------------------------------------------------------------------
    def step(self, batch: dict, ctx: StepContext) -> StepOut:
        if self.objective == "offpolicy_ce":
            return self.ce.step(batch, ctx)  # continued pretraining
        target, d, step = self.target, self.drafter, ctx.step
        if self.objective in ("specopd", "first_rejection"):
            t: Terms = specopd_terms(target, d, batch, self.W, self.temperature, self.sample_seed, step,
                                     first_rejection=self.objective == "first_rejection", backend=self.backend,
                                     chunk_rows=self.chunk_rows, vocab_chunk=self.vocab_chunk)
        elif self.objective == "offpolicy_tv":
            t = offpolicy_tv_terms(target, d, batch, self.W, self.backend, self.temperature, self.chunk_rows)
        else:
            t = draft_opd_terms(target, d, batch, self.W, self.rounds, self.temperature, self.sample_seed, step,
                                 self.eos_ids, self.backend, self.chunk_rows, self.vocab_chunk)
        loss, value = distributed_loss(ctx, t.numerator, t.count)
        ctx.counts.slot_predictions += t.positions  # supervised draft positions
        self.branches_seen += int(t.count)
        self.last_terms = {"loss": float(value), "mean_alpha": t.mean_alpha, "accept_prefix": t.accept_prefix,
                           "branches": int(t.count)}
        logs = {"train/loss": value, "train/mean_alpha": t.mean_alpha, "train/branch_accept_prefix": t.accept_prefix,
                "train/lr": ctx.lr,
                "train/supervised_per_s": ctx.counts.slot_predictions / max(ctx.train_seconds, 1e-9)}
        return StepOut(loss, logs)

    # ---- selection by the T=1 surrogate, beside the module's selection by greedy simulated τ -----------------------
    def after_validation(self, step: int, results: dict, row: dict | None, primary: str) -> None:
        if self.tv_eval is None or (self.tv_history and self.tv_history[-1]["step"] == step):
            return
        tv = self.tv_eval()
        self.tv_history.append({"step": step, **tv})
        tau = tv.get("tau_t1_surrogate")
        if tau is not None and (self.best_t1 is None or tau > self.best_t1["tau_t1_surrogate"]):
            self.best_t1 = {"step": step, "tau_t1_surrogate": tau, "tv": tv,
                            "sim_tau": results.get(primary, {}).get("sim_tau"), "state": self.snapshot()}

    def state(self) -> dict:
        return {"best_t1": self.best_t1, "tv_history": self.tv_history, "branches_seen": self.branches_seen}

    def load_state(self, st: dict) -> None:
        self.best_t1, self.tv_history = st.get("best_t1"), list(st.get("tv_history", []))
        self.branches_seen = int(st.get("branches_seen", 0))


@dataclass
class ObjectiveResult:
    objective: str
    steps: int
    train_seconds: float
    supervised_positions: int
    supervised_per_s: float
    final: dict  # per validation set: BlockStats summary at the last step
    best: dict  # per validation set at the best step
    best_step: int
    best_sim_tau: float
    history: list[dict] = field(default_factory=list)
    before: dict | None = None  # per validation set before training (when validated first)
    last_terms: dict = field(default_factory=dict)
    resumed_from_step: int | None = None
    tv_final: dict = field(default_factory=dict)  # held-out T=1 acceptance of the final state (`heldout_tv`)
    supervised_per_branch: float | None = None  # supervised positions per branch (None: no branches, the CE arm)
    best_t1: dict | None = None  # the best state by the T=1 surrogate (when selected on): step, figures (no weights)
    t1_state: dict | None = None  # ... its weights
    tv_history: list[dict] = field(default_factory=list)  # the T=1 evaluation at every validation (when selected on)


@torch.no_grad()
def heldout_tv(drafter: DFlashDrafter, target, seqs: SequenceSet, scfg, W: int, split: str = "heldout") -> dict:
    """What E2E-TV optimises, measured on held-out references: fresh on-policy branches (the same
    sampling, packed scoring and overlaps at the sampling temperature as training, seeded so every drafter
    sees the same anchors and random streams) -> mean overlap α, the branch-mean of (1/W_b) Σ_i Π_{j≤i} α_j
    and the acceptance length the products imply, τ_T1 ≈ 1 + mean_b Σ_{i≤W_b} Π_{j≤i} α_j (each branch
    over its own W_b positions; docs/algorithms.md "The E2E-TV loss": a surrogate, not an unbiased estimate). Greedy
    simulated τ cannot see a drafter that moved toward the target's T=1 distribution; this can. {} when
    `scfg.tv_eval_seqs` is 0 or the split is empty."""
    idx = seqs.indices(split)[: scfg.tv_eval_seqs]
    if not idx:
        return {}
    was = drafter.training
    drafter.eval()
    g = torch.Generator().manual_seed(scfg.seed + 7919)
    collate, dev = Collate(seqs, None), drafter.device
    backend = None if scfg.kernels == "auto" else scfg.kernels
    num = cnt = alpha_sum = accept = 0.0
    pos = 0
    for c in range(0, len(idx), scfg.batch_size):
        items = [(i, sample_branch_anchors(int(seqs.lengths[i]), int(seqs.prompt_len[i]), scfg.anchors_per_seq, g))
                 for i in idx[c:c + scfg.batch_size]]
        batch = {k: v.to(dev) for k, v in collate(items).items()}
        t = specopd_terms(target, drafter, batch, W, scfg.temperature, scfg.seed + 7919, c, backend=backend,
                          chunk_rows=scfg.chunk_rows, vocab_chunk=scfg.vocab_chunk)
        num, cnt, accept = num + float(t.numerator), cnt + float(t.count), accept + t.expected_accept
        alpha_sum, pos = alpha_sum + t.mean_alpha * t.positions, pos + t.positions
    drafter.train(was)
    return {"mean_alpha": alpha_sum / max(pos, 1), "prefix_accept_frac": 1.0 - num / max(cnt, 1.0),
            "tau_t1_surrogate": 1.0 + accept / max(cnt, 1.0), "branches": int(cnt), "sequences": len(idx)}


def train_objective(drafter: DFlashDrafter, seqs: SequenceSet, scfg, objective: str, workdir: str | Path, target,
                    store: FeatureStore | None, steps: int, max_minutes: float = 0.0, validate_first: bool = False,
                    logger=None, callbacks: list | None = None, log: Callable[[str], None] = print,
                    select_t1: bool = False) -> ObjectiveResult:
    """Train `drafter` in place with one objective for `steps` updates (it ends holding its best state by
    greedy simulated τ). select_t1: also evaluate the T=1 surrogate at every validation and keep the best
    state by it (`ObjectiveResult.best_t1` / `t1_state`; the final state's evaluation is then the last one)."""
    view = scfg.run_settings(steps, max_minutes)
    L.seed_everything(scfg.seed, workers=False, verbose=False)
    dm = branch_data(seqs, view, drafter.block_size, store, scfg.val_sets, train_feats=objective == "offpolicy_ce")
    W = scfg.branch_width or drafter.block_size - 1
    tv_eval = (lambda: heldout_tv(drafter, target, seqs, scfg, W)) if select_t1 else None
    obj = SpecOPDObjective(drafter, view, target, objective, scfg.branch_width, scfg.temperature, scfg.seq_rounds,
                           target.eos_token_ids, scfg.kernels, scfg.seed, tv_eval, scfg.chunk_rows, scfg.vocab_chunk)
    module = TrainModule(obj, steps, dm.val_names)
    tv_final: dict = {}

    def final_tv() -> None:  # the final state's T=1 acceptance, before the best state replaces it
        last = obj.tv_history[-1] if obj.tv_history else None
        if last is not None and last["step"] == module.global_step:
            tv_final.update({k: v for k, v in last.items() if k != "step"})
        else:
            tv_final.update(heldout_tv(drafter, target, seqs, scfg, obj.W))

    t0 = time.time()
    res = train(module, dm, view, workdir, logger, callbacks, log, f"specopd[{objective}]", validate_first,
                log_every_n_steps=1, before_restore=final_tv)
    before = res.before
    if before is None and module.history and module.history[0]["step"] == 0:
        before = {k: {"sim_tau": v} for k, v in module.history[0].items() if k not in ("step", "train_minutes")}
    log(f"specopd[{objective}]: {res.steps} steps in {time.time() - t0:.0f}s, held-out sim τ "
        f"{module.last_val.get(module.primary, {}).get('sim_tau', float('nan')):.3f} (best {res.best_sim_tau:.3f} "
        f"at step {res.best_step}), {res.slot_predictions_per_s:.0f} supervised/s")
    t1 = obj.best_t1
    return ObjectiveResult(objective=objective, steps=res.steps, train_seconds=module.train_seconds,
                           supervised_positions=res.slot_predictions, supervised_per_s=res.slot_predictions_per_s,
                           final=module.last_val, best=res.best_metrics, best_step=res.best_step,
                           best_sim_tau=res.best_sim_tau, history=res.history, before=before,
                           last_terms=obj.last_terms, tv_final=tv_final, resumed_from_step=res.resumed_from_step,
                           supervised_per_branch=(res.slot_predictions / obj.branches_seen
                                                  if obj.branches_seen else None),
                           best_t1=None if t1 is None else {k: v for k, v in t1.items() if k != "state"},
                           t1_state=None if t1 is None else t1["state"], tv_history=list(obj.tv_history))
