"""Co-training of a drafter and a corrector (docs/algorithms.md: "Training and co-training" for DCOCO,
"Baselines and controls" for DSpark / Domino), any family.

`CoTrainModule(DrafterModule)`: L = L_drafter + λ·L_corr, where L_corr is the corrector's own loss
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
`train_corrector(...)`: one variant's run, resumable, through the shared fit driver.
"""
from __future__ import annotations

from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Callable

import lightning as L
import torch
from torch import Tensor

from draftlab.config import CorrectorConfig, PretrainConfig
from draftlab.corrector.base import ANCHOR, TEACHER, Corrector, anchor_taps, drafter_block, scale_grad
from draftlab.corrector.variants import Variant
from draftlab.drafter.model import DFlashDrafter
from draftlab.errors import DraftlabError
from draftlab.recipes.corrector.evaluate import SetStats, eval_batch
from draftlab.training.data import DrafterDataModule
from draftlab.training.features import FeatureStore, SequenceSet
from draftlab.training.fit import TrainResult, budget_steps, train
from draftlab.training.module import DrafterModule, block_targets, cpu_state, global_ratio, lr_factor


NO_TEACHER = ("LiLiCorr's penalty (w_pen > 0: presets base and margin) needs the target's logits, which the feature "
              "cache does not hold; set pretrain.cache_features=false (the target runs online) or "
              "corrector.families.lilicorr.preset=nopen")


class CoTrainModule(DrafterModule):
    """Drafter + corrector, L = L_drafter + λ·L_corr (or λ·L_corr alone with a frozen drafter)."""

    def __init__(self, drafter: DFlashDrafter, corrector: Corrector, cfg: PretrainConfig, ccfg: CorrectorConfig,
                 frozen: bool = False, total_steps: int = 0, val_names: list[str] | None = None, target=None,
                 rule: str = "greedy", val_rules: tuple[str, ...] | None = None, variant: Variant | None = None,
                 lam: float = 0.75):
        super().__init__(drafter, cfg, total_steps, val_names, target, "greedy")
        self.corrector, self.ccfg, self.frozen, self.rule, self.lam = corrector, ccfg, frozen, rule, lam
        self.val_rules = tuple(val_rules or (rule,))
        v = (variant or Variant("", "")).resolve(ccfg.grad_hidden, ccfg.grad_logits, ccfg.frozen_warmup)
        self.grad_hidden, self.grad_logits, self.loss_kind = v.grad_hidden, v.grad_logits, v.loss
        self.frozen_warmup = 0.0 if frozen else v.frozen_warmup
        self.k = min(ccfg.k, drafter.arch.draft_vocab_size or drafter.arch.target_vocab_size)
        if self.cfg.topk != self.k:  # coverage is reported at the corrector's K
            self.cfg = replace(self.cfg, topk=self.k)
        self.backend = None if ccfg.kernels == "auto" else ccfg.kernels
        if frozen:
            drafter.requires_grad_(False)
        self.reads_anchor = ANCHOR in corrector.contract.reads  # the taps before each block (its contract says)
        self.keep_target_logits = TEACHER in corrector.contract.reads  # the target's logits (e.g. LiLiCorr's penalty)
        self.transitions_supervised = 0.0  # Σ supervised transitions (DCOCO) / slots (sequential)
        self.transitions_total = 0

    # ---- optimisation --------------------------------------------------------------------------------------
    def param_groups(self) -> list[dict]:
        def split(mod, lr, wd, drafter):
            ps = [p for p in mod.parameters() if p.requires_grad]
            return [{"params": [p for p in ps if p.ndim >= 2], "weight_decay": wd, "lr": lr, "drafter": drafter},
                    {"params": [p for p in ps if p.ndim < 2], "weight_decay": 0.0, "lr": lr, "drafter": drafter}]

        groups = split(self.corrector, self.ccfg.lr, self.ccfg.weight_decay, False)
        if not self.frozen:
            groups += split(self.drafter, self.cfg.lr, self.cfg.weight_decay, True)
        return [g for g in groups if g["params"]]

    def warming_up(self) -> bool:
        """True while the drafter is still frozen by the corrector's warm-up."""
        return self.frozen_warmup > 0 and self.progress() < self.frozen_warmup

    def configure_optimizers(self):
        out = super().configure_optimizers()
        if self.frozen_warmup > 0:  # the drafter's schedule starts when it joins (warm-up + decay over the rest)
            c, w, opt = self.cfg, self.frozen_warmup, out["optimizer"]
            corr = lambda _s: lr_factor(self.progress(), c.warmup, c.schedule, c.min_lr_ratio)  # noqa: E731
            late = lambda _s: lr_factor((self.progress() - w) / (1.0 - w), c.warmup, c.schedule, c.min_lr_ratio)  # noqa: E731
            out["lr_scheduler"]["scheduler"] = torch.optim.lr_scheduler.LambdaLR(
                opt, [late if g.get("drafter") else corr for g in opt.param_groups])
        return out

    # ---- losses ----------------------------------------------------------------------------------------------
    def compute_losses(self, batch: dict) -> dict:
        """Both losses on one batch: {'loss', 'drafter', 'corrector', 'den_corr', 'mask', 'pair_valid'}."""
        frozen = self.frozen or self.warming_up()
        with torch.no_grad() if frozen else nullcontext():
            d = self.drafter_step(batch, greedy=True)
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
        block = drafter_block(self.drafter, hidden, slot0, self._seeds(batch), logits, anchor=anchor)
        if self.keep_target_logits:  # the target's logits (online only): a contract that reads the teacher
            z, self.target_logits = self.target_logits, None
            if z is None:
                raise DraftlabError(NO_TEACHER)
            block.teacher = self.corrector.teacher_weights(block, z, batch["anchors"], labels)
        cl = self.corrector.loss(block, labels, valid, self.t2d, self.ccfg.rho, self.ccfg.cumulative_mask,
                                 self.loss_kind)
        l_corr = global_ratio(cl.num, cl.den)
        loss = self.ccfg.lambda_corr * l_corr if frozen else d["loss"] + self.ccfg.lambda_corr * l_corr
        return {"loss": loss, "drafter": d["loss"], "corrector": l_corr, "den_corr": cl.den, "mask": cl.mask,
                "pair_valid": cl.valid}

    def training_step(self, batch: dict, batch_idx: int) -> Tensor:
        out = self.compute_losses(batch)
        bs = batch["ids"].shape[0]
        self.transitions_supervised += float(out["mask"].sum())
        self.transitions_total += int(out["pair_valid"].sum())
        self.log_train(out["drafter"], bs)
        ddp = self.trainer.world_size > 1  # each rank's loss is W x its share of the global ratio: mean = global loss
        self.log("train/corrector_loss", out["corrector"].detach(), batch_size=bs, prog_bar=True, sync_dist=ddp)
        self.log("train/total_loss", out["loss"].detach(), batch_size=bs, sync_dist=ddp)
        self.log("train/supervised_transition_frac", self.transitions_supervised / max(self.transitions_total, 1),
                 batch_size=bs)
        return out["loss"]

    # ---- validation ----------------------------------------------------------------------------------------------
    def new_val_stats(self) -> SetStats:
        return SetStats(self.drafter.block_size - 1, self.k, self.val_rules)

    def validate_batch(self, batch: dict, stats: SetStats) -> None:
        eval_batch(self.drafter, self.corrector, batch, self._features(batch, greedy=True), stats, self.k,
                   self.val_rules, self.lam, self.backend)

    def val_results(self) -> dict:
        return {name: st.summary(self.rule) for name, st in self._stats.items() if st.blocks}

    def on_validation_epoch_end(self) -> None:
        super().on_validation_epoch_end()
        row = self.history[-1] if self.history else None
        if row is not None and row["step"] == int(self.global_step) and self.primary in self.last_val:
            # the budget curve also carries the drafter's own τ (the corrector's effect on the drafter over time)
            row[f"{self.primary}_uncorrected"] = self.last_val[self.primary]["sim_tau_uncorrected"]

    def snapshot(self) -> dict:
        return {"drafter": cpu_state(self.drafter), "corrector": cpu_state(self.corrector)}

    def restore_best(self) -> None:
        self.drafter.load_state_dict(self.best["state"]["drafter"])
        self.corrector.load_state_dict(self.best["state"]["corrector"])

    def result_extras(self) -> dict:
        return {"supervised_transition_frac": self.transitions_supervised / max(self.transitions_total, 1),
                "frozen": self.frozen, "grad_hidden": self.grad_hidden, "grad_logits": self.grad_logits,
                "frozen_warmup": self.frozen_warmup, "loss": self.loss_kind}

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        super().on_save_checkpoint(checkpoint)
        checkpoint["draftlab"].update(transitions_supervised=self.transitions_supervised,
                                      transitions_total=self.transitions_total)

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        super().on_load_checkpoint(checkpoint)
        st = checkpoint.get("draftlab", {})
        self.transitions_supervised = float(st.get("transitions_supervised", 0.0))
        self.transitions_total = int(st.get("transitions_total", 0))


def train_corrector(drafter: DFlashDrafter, corrector: Corrector, seqs: SequenceSet, cfg: PretrainConfig,
                    ccfg: CorrectorConfig, workdir: str | Path, store: FeatureStore | None = None, target=None,
                    frozen: bool = False, rule: str | None = None, logger=None, callbacks: list | None = None,
                    log: Callable[[str], None] = print, train_sample: int = 16, val_rules: tuple[str, ...] | None = None,
                    variant: Variant | None = None, lam: float = 0.75) -> TrainResult:
    """Co-train in place (drafter and corrector end holding the best validation state) and report.
    `cfg` is the run settings (`CorrectorConfig.run_settings`): budget, batches, drafter lr, schedule;
    `val_rules`: the path rules every validation scores (default: `rule` alone); `variant`: how the corrector
    loss reaches the drafter and which loss kind (default: the config's settings, the joint loss); `rule` (default
    greedy) and `lam`: the path rule validations report first and the geometric rule's λ (the family's settings)."""
    if store is None and target is None:
        raise DraftlabError("train_corrector needs a FeatureStore or the target (features on the fly)")
    if store is not None and TEACHER in corrector.contract.reads:
        raise DraftlabError(NO_TEACHER)
    L.seed_everything(cfg.seed, workers=False, verbose=False)
    dm = DrafterDataModule(seqs, cfg, drafter.block_size, store, train_sample=train_sample, arch=drafter.arch)
    module = CoTrainModule(drafter, corrector, cfg, ccfg, frozen, budget_steps(cfg, dm), dm.val_names, target,
                           rule or "greedy", val_rules, variant, lam)
    return train(module, dm, cfg, workdir, logger, callbacks, log, "corrector")
