"""Co-training of a drafter and a corrector (docs/algorithms.md: "Training and co-training" for DCOCO,
"Baselines and controls" for DSpark / Domino), any family.

`CoTrain` (an objective of the one training module, `draftlab.training.module.TrainModule`): L = L_drafter + λ·L_corr, where L_corr is the corrector's own loss
(`Corrector.loss`: DCOCO's masked joint-K² softmax CE over the top-K candidates of every proposed slot
of every anchor's block, or a within-row ablation; the sequential correctors' decay-weighted CE of the
teacher-forced corrected logits), on the hidden states and draft logits of the same multi-anchor drafter
pass, labels = the target's greedy tokens under teacher forcing (the feature store's `greedy`, or the
target on the fly). Both losses divide a numerator by a denominator summed over ranks (distributed-safe).

How L_corr reaches the drafter is the variant's (`draftlab.corrector.variants.Variant`, defaults from the
config): `grad_hidden` / `grad_logits` weight its gradient through the hidden-state path and through the
logit path (`scale_grad`: 1 = the paper's joint training, 0 = stop-gradient); `frozen_warmup` freezes the
drafter for the first fraction of the budget (the corrector alone trains), after which the drafter joins
with its own learning-rate warm-up and decay over the rest of the budget; `frozen=True` (the
frozen-backbone ablation) runs the drafter without gradients throughout and trains only the corrector.
On a seeded drafter the corrector reads the blocks as the engine drafts them: the drafter pass's logits
carry the seed bias and the seed column, and `draftlab.corrector.base.drafter_block` maps the column to each
slot's seed (candidates, labels, the sequential correctors' re-applied head).
Validation: `draftlab.recipes.corrector.evaluate` (corrected vs uncorrected vs both oracles, every path
rule asked for); the best state (drafter + corrector) is the one with the highest corrected held-out τ.
`train_corrector(drafter, corrector, seqs, CoTrainRun(...))`: one variant's run, resumable, through the shared fit driver.
"""
from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import lightning as L
import torch

from draftlab.config import CorrectorConfig, PretrainConfig
from draftlab.corrector.base import ANCHOR, TEACHER, Corrector, anchor_taps, drafter_block, scale_grad
from draftlab.corrector.variants import Variant
from draftlab.drafter.model import DFlashDrafter
from draftlab.errors import DraftlabError
from draftlab.recipes.corrector.evaluate import SetStats, eval_batch
from draftlab.training.data import DrafterDataModule
from draftlab.training.features import FeatureStore, SequenceSet
from draftlab.training.ce import DrafterCE, block_targets
from draftlab.training.fit import TrainResult, budget_steps, train
from draftlab.training.module import TrainModule
from draftlab.training.objective import StepContext, StepOut, cpu_state, decay_groups, global_ratio, lr_factor


NO_TEACHER = ("LiLiCorr's penalty (w_pen > 0: presets base and margin) needs the target's logits, which the feature "
              "cache does not hold; set pretrain.cache_features=false (the target runs online) or "
              "corrector.families.lilicorr.preset=nopen")


class CoTrain:
    """Drafter + corrector, L = L_drafter + λ·L_corr (or λ·L_corr alone with a frozen drafter), as the one training
    module drives it. The drafter's half is pretraining's objective (`DrafterCE`: its loss pieces, features and
    counters); validation is the corrector recipe's (`eval_batch`: corrected vs uncorrected vs both oracles)."""

    def __init__(self, drafter: DFlashDrafter, corrector: Corrector, cfg: PretrainConfig, ccfg: CorrectorConfig,
                 frozen: bool = False, target=None, rule: str = "greedy", val_rules: tuple[str, ...] | None = None,
                 variant: Variant | None = None, lam: float = 0.75):
        self.k = min(ccfg.k, drafter.arch.draft_vocab_size or drafter.arch.target_vocab_size)
        self.cfg = replace(cfg, topk=self.k) if cfg.topk != self.k else cfg  # coverage is reported at the corrector's K
        self.ce = DrafterCE(drafter, self.cfg, target, "greedy")
        self.drafter, self.corrector, self.ccfg, self.frozen, self.rule, self.lam = drafter, corrector, ccfg, frozen, rule, lam
        self.val_rules = tuple(val_rules or (rule,))
        v = (variant or Variant("", "")).resolve(ccfg.grad_hidden, ccfg.grad_logits, ccfg.frozen_warmup)
        self.grad_hidden, self.grad_logits, self.loss_kind = v.grad_hidden, v.grad_logits, v.loss
        self.frozen_warmup = 0.0 if frozen else v.frozen_warmup
        self.backend = None if ccfg.kernels == "auto" else ccfg.kernels
        if frozen:
            drafter.requires_grad_(False)
        self.reads_anchor = ANCHOR in corrector.contract.reads  # the taps before each block (its contract says)
        self.ce.keep_target_logits = TEACHER in corrector.contract.reads  # the target's logits (LiLiCorr's penalty)
        self.transitions_supervised = 0.0  # Σ supervised transitions (DCOCO) / slots (sequential)
        self.transitions_total = 0

    # ---- optimisation --------------------------------------------------------------------------------------------
    def modules(self) -> dict:
        return {"drafter": self.drafter, "corrector": self.corrector}

    def param_groups(self) -> list[dict]:
        groups = decay_groups(self.corrector, self.ccfg.weight_decay, lr=self.ccfg.lr, drafter=False)
        if not self.frozen:
            groups += decay_groups(self.drafter, self.cfg.weight_decay, lr=self.cfg.lr, drafter=True)
        return [g for g in groups if g["params"]]

    def lr_factor(self, group: dict, progress: float) -> float:
        """The corrector's schedule spans the budget; with a warm-up freeze the drafter's starts when it joins
        (warm-up + decay over the rest of the budget)."""
        c, w = self.cfg, self.frozen_warmup
        if w > 0 and group.get("drafter"):
            progress = (progress - w) / (1.0 - w)
        return lr_factor(progress, c.warmup, c.schedule, c.min_lr_ratio)

    def warming_up(self, progress: float) -> bool:
        """True while the drafter is still frozen by the corrector's warm-up (`progress`: the budget spent)."""
        return self.frozen_warmup > 0 and progress < self.frozen_warmup

    # ---- losses ----------------------------------------------------------------------------------------------------
    def compute_losses(self, batch: dict, ctx: StepContext | None = None) -> dict:
        """Both losses on one batch: {'loss', 'drafter', 'corrector', 'den_corr', 'mask', 'pair_valid'} (ctx: the
        training step's, None outside training: the budget's start, no counters)."""
        frozen = self.frozen or self.warming_up(0.0 if ctx is None else ctx.progress)
        with torch.no_grad() if frozen else nullcontext():
            d = self.ce.loss_parts(batch, None if ctx is None else ctx.counts, greedy=True)
        hidden, logits = d["hidden"][:, :, 1:], d["logits"]  # [B, A, n, H], [B, A, n, Vd]
        if frozen:  # no gradient into the drafter (already so under no_grad; explicit)
            hidden, logits = hidden.detach(), logits.detach()
        else:  # the corrector loss's gradient into the drafter, weighted per path
            hidden, logits = scale_grad(hidden, self.grad_hidden), scale_grad(logits, self.grad_logits)
        # the target's greedy tokens, or (corrector.labels=reference) the reference's own: sampled at T>0
        labels, valid = block_targets(batch, d["greedy"], self.drafter.block_size, self.ccfg.labels == "greedy")
        slot0 = batch["ids"].gather(1, batch["anchors"])  # [B, A] the blocks' slot-0 tokens
        # a seeded drafter's logits already read the blocks' seeds (seed bias / seed column); the block maps them
        anchor = anchor_taps(d["feats"], batch["anchors"], batch["ctx_valid"]) if self.reads_anchor else None
        block = drafter_block(self.drafter, hidden, slot0, self.ce.seeds(batch), logits, anchor=anchor)
        if self.ce.keep_target_logits:  # the target's logits (online only): a contract that reads the teacher
            z, self.ce.target_logits = self.ce.target_logits, None
            if z is None:
                raise DraftlabError(NO_TEACHER)
            block.teacher = self.corrector.teacher_weights(block, z, batch["anchors"], labels)
        cl = self.corrector.loss(block, labels, valid, self.ce.t2d, self.ccfg.rho, self.ccfg.cumulative_mask,
                                 self.loss_kind)
        l_corr = global_ratio(cl.num, cl.den)
        loss = self.ccfg.lambda_corr * l_corr if frozen else d["loss"] + self.ccfg.lambda_corr * l_corr
        return {"loss": loss, "drafter": d["loss"], "corrector": l_corr, "den_corr": cl.den, "mask": cl.mask,
                "pair_valid": cl.valid}

    def step(self, batch: dict, ctx: StepContext) -> StepOut:
        out = self.compute_losses(batch, ctx)
        self.transitions_supervised += float(out["mask"].sum())
        self.transitions_total += int(out["pair_valid"].sum())
        logs = {**self.ce.train_logs(out["drafter"], ctx), "train/corrector_loss": out["corrector"].detach(),
                "train/total_loss": out["loss"].detach(),
                "train/supervised_transition_frac": self.transitions_supervised / max(self.transitions_total, 1)}
        # each rank's loss is W x its share of the global ratio: the mean over ranks is the global loss
        return StepOut(out["loss"], logs, synced=("train/loss", "train/corrector_loss", "train/total_loss"))

    # ---- validation ------------------------------------------------------------------------------------------------
    def new_val_stats(self) -> SetStats:
        return SetStats(self.drafter.block_size - 1, self.k, self.val_rules)

    def validate_batch(self, batch: dict, stats: SetStats) -> None:
        eval_batch(self.drafter, self.corrector, batch, self.ce.features(batch, greedy=True), stats, self.k,
                   self.val_rules, self.lam, self.backend)

    def val_summary(self, stats: SetStats) -> dict:
        return stats.summary(self.rule)

    def after_validation(self, step: int, results: dict, row: dict | None, primary: str) -> None:
        if row is not None and primary in results:
            # the budget curve also carries the drafter's own τ (the corrector's effect on the drafter over time)
            row[f"{primary}_uncorrected"] = results[primary]["sim_tau_uncorrected"]

    def snapshot(self) -> dict:
        return {"drafter": cpu_state(self.drafter), "corrector": cpu_state(self.corrector)}

    def restore(self, state: dict) -> None:
        self.drafter.load_state_dict(state["drafter"])
        self.corrector.load_state_dict(state["corrector"])

    def extras(self) -> dict:
        return {"supervised_transition_frac": self.transitions_supervised / max(self.transitions_total, 1),
                "frozen": self.frozen, "grad_hidden": self.grad_hidden, "grad_logits": self.grad_logits,
                "frozen_warmup": self.frozen_warmup, "loss": self.loss_kind}

    def state(self) -> dict:
        return {"transitions_supervised": self.transitions_supervised, "transitions_total": self.transitions_total}

    def load_state(self, st: dict) -> None:
        self.transitions_supervised = float(st.get("transitions_supervised", 0.0))
        self.transitions_total = int(st.get("transitions_total", 0))


@dataclass(frozen=True)
class CoTrainRun:
    """One co-training run's spec: its run settings (`CorrectorConfig.run_settings`: budget, batches, drafter lr,
    schedule), the corrector section, where it resumes, and how this variant trains — `variant` (how the corrector
    loss reaches the drafter, the loss kind; default: the section's settings, the joint loss), `frozen` (the drafter
    not trained), `rule` / `val_rules` (the path rule validations report first / every rule they score) and `lam`
    (the geometric rule's λ: the family's settings); `train_sample`: training sequences validated as a set."""

    settings: PretrainConfig
    section: CorrectorConfig
    workdir: Path
    variant: Variant | None = None
    frozen: bool = False
    rule: str = "greedy"
    val_rules: tuple[str, ...] = ()
    lam: float = 0.75
    train_sample: int = 16


def train_corrector(drafter: DFlashDrafter, corrector: Corrector, seqs: SequenceSet, run: CoTrainRun,
                    store: FeatureStore | None = None, target=None, logger=None, callbacks: list | None = None,
                    log: Callable[[str], None] = print) -> TrainResult:
    """Co-train in place (drafter and corrector end holding the best validation state) and report. Features come from
    `store` or, without one, from `target` on the fly."""
    if store is None and target is None:
        raise DraftlabError("train_corrector needs a FeatureStore or the target (features on the fly)")
    if store is not None and TEACHER in corrector.contract.reads:
        raise DraftlabError(NO_TEACHER)
    cfg = run.settings
    L.seed_everything(cfg.seed, workers=False, verbose=False)
    dm = DrafterDataModule(seqs, cfg, drafter.block_size, store, train_sample=run.train_sample, arch=drafter.arch)
    objective = CoTrain(drafter, corrector, cfg, run.section, run.frozen, target, run.rule, run.val_rules or None,
                        run.variant, run.lam)
    module = TrainModule(objective, budget_steps(cfg, dm), dm.val_names)
    return train(module, dm, cfg, Path(run.workdir), logger, callbacks, log, "corrector")
