"""SpecOPD training (SPEC §3) and its comparison arms, on top of pretraining's data, features and module.

Reused from `draftlab.training.pretrain` (not copied): the bucketed batch sampler, the collate
function, the validation sets and loaders (`DrafterDataModule`), the budget clock, optimiser,
schedule, simulated-τ validation against the target's greedy tokens, best-state keeping and
resumable checkpoints (`PretrainModule`, `LastCheckpoint`), and the tap-feature cache
(`FeatureStore`, used for validation; training takes its context taps from the trunk pass).

Arms (same references, same number of updates, all starting from the pretrained drafter):
- `specopd`          on-policy branches after random response anchors, packed tree scoring, E2E-TV;
- `first_rejection`  the same, supervising only up to and including the first rejected position;
- `offpolicy_tv`     E2E-TV on the reference continuation;
- `offpolicy_ce`     pretraining's CE step (= continued pretraining);
- `sequential`       the Draft-OPD-style sequential loop (draft -> verify -> accepted prefix decides).
The E2E-TV numerator and branch count are summed across ranks before dividing (`distributed_loss`).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import lightning as L
import torch
from torch import Tensor
from torch.utils.data import DataLoader

from draftlab.config import PretrainConfig
from draftlab.errors import DraftlabError
from draftlab.drafter.model import DFlashDrafter
from draftlab.specopd.terms import Terms, offpolicy_tv_terms, draft_opd_terms, specopd_terms
from draftlab.specopd.tree import sample_branch_anchors
from draftlab.training.corrector import file_digest
from draftlab.training.features import FeatureStore, SequenceSet
from draftlab.training.pretrain import (
    BucketBatchSampler, Collate, DrafterDataModule, LastCheckpoint, PretrainModule, TrainBlocks, _accelerator, run_key,
)

ARMS = ("specopd", "first_rejection", "offpolicy_tv", "offpolicy_ce", "sequential")


def pretrain_view(cfg, max_steps: int, max_minutes: float) -> PretrainConfig:
    return cfg.run_settings(max_steps, max_minutes)


# ---- data: pretraining's, with branch anchors -------------------------------------------------------------


class BranchBlocks(TrainBlocks):
    """Item = (sequence index, up to A random anchors in [P, L−2]): branches may be cut short by the
    end of the reference (W_b < W), unlike pretraining's full blocks."""

    def __getitem__(self, i: int):
        return i, sample_branch_anchors(int(self.seqs.lengths[i]), int(self.seqs.prompt_len[i]), self.A)


class SpecOPDDataModule(DrafterDataModule):
    """Pretraining's data module; training items carry branch anchors. `val_sets` limits validation
    to the named sets (heldout, eval suites; empty = all)."""

    def __init__(self, seqs: SequenceSet, cfg: PretrainConfig, block_size: int, store: FeatureStore | None,
                 val_sets: list[str] | None = None, train_feats: bool = False):
        super().__init__(seqs, cfg, block_size, store, train_sample=0)
        if val_sets:
            self.val_sets = {k: v for k, v in self.val_sets.items() if k in val_sets}
        self.train_collate = Collate(seqs, store if train_feats else None)

    def train_dataloader(self) -> DataLoader:
        sampler = BucketBatchSampler(self.train_idx, self.seqs.lengths, self.cfg.batch_size, self.cfg.seed)
        return DataLoader(BranchBlocks(self.seqs, self.S, self.cfg.anchors_per_seq), batch_sampler=sampler,
                          collate_fn=self.train_collate, num_workers=0)


# ---- the module -------------------------------------------------------------------------------------------------


def distributed_loss(module: L.LightningModule, numerator: Tensor, count: Tensor) -> tuple[Tensor, Tensor]:
    """(loss to backpropagate, its global value). Counts are summed over ranks before dividing; DDP's
    gradient averaging over R ranks then gives ∇ Σ_r num_r / Σ_r cnt_r exactly."""
    strategy, world = module.trainer.strategy, module.trainer.world_size
    total = strategy.reduce(count.detach().float(), reduce_op="sum").clamp(min=1)
    value = strategy.reduce(numerator.detach().float(), reduce_op="sum") / total
    return numerator * world / total, value


class SpecOPDModule(PretrainModule):
    def __init__(self, drafter: DFlashDrafter, cfg: PretrainConfig, total_steps: int, val_names: list[str], target,
                 arm: str = "specopd", branch_width: int = 0, temperature: float = 1.0, rounds: int = 8,
                 eos_ids: list[int] = (), kernels: str = "auto", sample_seed: int = 0):
        super().__init__(drafter, cfg, total_steps, val_names, target, val_labels="greedy")
        if arm not in ARMS:
            raise DraftlabError(f"unknown SpecOPD arm {arm!r}; choose one of: {', '.join(ARMS)}")
        self.arm, self.temperature, self.rounds, self.eos_ids = arm, temperature, rounds, list(eos_ids)
        self.W = branch_width or drafter.block_size - 1
        self.backend = None if kernels == "auto" else kernels
        self.sample_seed = sample_seed
        self.last_terms: dict = {}

    def training_step(self, batch: dict, batch_idx: int) -> Tensor:
        if self.arm == "offpolicy_ce":
            return super().training_step(batch, batch_idx)  # continued pretraining
        target, d, step = self._target, self.drafter, int(self.global_step)
        if self.arm in ("specopd", "first_rejection"):
            t: Terms = specopd_terms(target, d, batch, self.W, self.temperature, self.sample_seed, step,
                                     first_rejection=self.arm == "first_rejection", backend=self.backend)
        elif self.arm == "offpolicy_tv":
            t = offpolicy_tv_terms(target, d, batch, self.W, self.backend)
        else:
            t = draft_opd_terms(target, d, batch, self.W, self.rounds, self.temperature, self.sample_seed, step,
                                 self.eos_ids, self.backend)
        loss, value = distributed_loss(self, t.numerator, t.count)
        self.slot_predictions += t.positions  # supervised draft positions
        self.last_terms = {"loss": float(value), "mean_alpha": t.mean_alpha, "accept_prefix": t.accept_prefix,
                           "branches": int(t.count)}
        bs = batch["ids"].shape[0]
        self.log("train/loss", value, batch_size=bs, prog_bar=True)
        self.log("train/mean_alpha", t.mean_alpha, batch_size=bs)
        self.log("train/branch_accept_prefix", t.accept_prefix, batch_size=bs)
        self.log("train/lr", self.trainer.optimizers[0].param_groups[0]["lr"], batch_size=bs)
        self.log("train/supervised_per_s", self.slot_predictions / max(self.train_seconds, 1e-9), batch_size=bs)
        return loss


# ---- one arm -----------------------------------------------------------------------------------------------------


@dataclass
class ArmResult:
    arm: str
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


@torch.no_grad()
def heldout_tv(drafter: DFlashDrafter, target, seqs: SequenceSet, scfg, W: int, split: str = "heldout") -> dict:
    """What E2E-TV optimises, measured on held-out references: fresh on-policy branches (the same
    sampling, packed scoring and overlaps as training, seeded so every drafter sees the same anchors and
    random streams) -> mean overlap α, the branch-mean of (1/W_b) Σ_i Π_{j≤i} α_j, and the T=1
    acceptance length it implies, τ_T1 ≈ 1 + W·that (SPEC §3.3: a surrogate, not an unbiased
    estimate). Greedy simulated τ cannot see a drafter that moved toward the target's T=1
    distribution; this can. {} when `scfg.tv_eval_seqs` is 0 or the split is empty."""
    idx = seqs.indices(split)[: scfg.tv_eval_seqs]
    if not idx:
        return {}
    was = drafter.training
    drafter.eval()
    g = torch.Generator().manual_seed(scfg.seed + 7919)
    collate, dev = Collate(seqs, None), drafter.device
    backend = None if scfg.kernels == "auto" else scfg.kernels
    num = cnt = alpha_sum = 0.0
    pos = 0
    for c in range(0, len(idx), scfg.batch_size):
        items = [(i, sample_branch_anchors(int(seqs.lengths[i]), int(seqs.prompt_len[i]), scfg.anchors_per_seq, g))
                 for i in idx[c:c + scfg.batch_size]]
        batch = {k: v.to(dev) for k, v in collate(items).items()}
        t = specopd_terms(target, drafter, batch, W, scfg.temperature, scfg.seed + 7919, c, backend=backend)
        num, cnt = num + float(t.numerator), cnt + float(t.count)
        alpha_sum, pos = alpha_sum + t.mean_alpha * t.positions, pos + t.positions
    drafter.train(was)
    frac = 1.0 - num / max(cnt, 1.0)
    return {"mean_alpha": alpha_sum / max(pos, 1), "prefix_accept_frac": frac, "tau_t1_surrogate": 1.0 + W * frac,
            "branches": int(cnt), "sequences": len(idx)}


def train_arm(drafter: DFlashDrafter, seqs: SequenceSet, scfg, arm: str, workdir: str | Path, target,
              store: FeatureStore | None, steps: int, max_minutes: float = 0.0, validate_first: bool = False,
              logger=None, callbacks: list | None = None, log: Callable[[str], None] = print) -> ArmResult:
    """Train `drafter` in place with one arm for `steps` updates (it ends holding its best state)."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    view = pretrain_view(scfg, steps, max_minutes)
    L.seed_everything(scfg.seed, workers=False, verbose=False)
    dm = SpecOPDDataModule(seqs, view, drafter.block_size, store, scfg.val_sets, train_feats=arm == "offpolicy_ce")
    module = SpecOPDModule(drafter, view, steps, dm.val_names, target, arm, scfg.branch_width, scfg.temperature,
                           scfg.seq_rounds, target.eos_token_ids, scfg.kernels, scfg.seed)
    accel, devices = _accelerator(drafter.device)
    precision = view.precision if view.precision != "auto" else ("bf16-mixed" if accel == "gpu" else "32-true")
    ckpt = workdir / "last.ckpt"
    trainer = L.Trainer(
        accelerator=accel, devices=devices, precision=precision, max_steps=steps, max_epochs=-1,
        val_check_interval=view.val_every or 10**9, check_val_every_n_epoch=None, num_sanity_val_steps=0,
        logger=logger if logger is not None else False, enable_checkpointing=False,
        callbacks=[LastCheckpoint(ckpt, view.checkpoint_every), *(callbacks or [])],
        gradient_clip_val=view.grad_clip or None, log_every_n_steps=1, enable_progress_bar=False,
        enable_model_summary=False, use_distributed_sampler=False, default_root_dir=str(workdir))
    resume = ckpt if (view.resume and ckpt.exists()) else None
    before = None
    if resume is None and validate_first:
        trainer.validate(module, datamodule=dm, verbose=False)  # step 0: the pretrained drafter
        before = dict(module.last_val)
    elif resume is not None:
        log(f"specopd[{arm}]: resuming from {resume}")
    t0 = time.time()
    module.start_step = -1  # set by on_train_start; stays -1 when a finished run is resumed
    trainer.fit(module, datamodule=dm, ckpt_path=str(resume) if resume else None, weights_only=True)
    if before is None and module.history and module.history[0]["step"] == 0:
        before = {k: {"sim_tau": v} for k, v in module.history[0].items() if k not in ("step", "train_minutes")}
    n = int(trainer.global_step)
    if not module.history or module.history[-1]["step"] != n:
        trainer.validate(module, datamodule=dm, verbose=False)
    if module.best is None:
        raise DraftlabError("no validation blocks: the references are too short for the block size")
    tv_final = heldout_tv(drafter, target, seqs, scfg, module.W)  # before the best state replaces the final one
    drafter.load_state_dict(module.best["state"])
    log(f"specopd[{arm}]: {n} steps in {time.time() - t0:.0f}s, held-out sim τ "
        f"{module.last_val.get(module.primary, {}).get('sim_tau', float('nan')):.3f} (best {module.best['sim_tau']:.3f} "
        f"at step {module.best['step']}), {module.slot_predictions / max(module.train_seconds, 1e-9):.0f} supervised/s")
    return ArmResult(arm=arm, steps=n, train_seconds=module.train_seconds, supervised_positions=module.slot_predictions,
                     supervised_per_s=module.slot_predictions / max(module.train_seconds, 1e-9),
                     final=module.last_val, best=module.best["metrics"], best_step=module.best["step"],
                     best_sim_tau=module.best["sim_tau"], history=list(module.history), before=before,
                     last_terms=module.last_terms, tv_final=tv_final,
                     resumed_from_step=(module.start_step if module.start_step >= 0 else n) if resume else None)


# ---- the whole comparison (what the stage runs) ---------------------------------------------------------------------


@dataclass
class SpecOPDOutcome:
    drafter: DFlashDrafter  # the SpecOPD arm's best state
    report: dict
    curve: list[dict]  # (step, train_minutes, sim τ per set) of the SpecOPD arm
    arms: dict[str, ArmResult]


def specopd_from_references(target, df, scfg, base_drafter: str | Path, work_root: str | Path,
                            feature_root: str | Path | None = None, logger=None,
                            log: Callable[[str], None] = print) -> SpecOPDOutcome:
    """references -> SpecOPD drafter + comparison report. `feature_root` is where the pretraining stage
    cached tap features (reused when the key matches); runs resume under work_root/runs/<key>/<arm>."""
    from dataclasses import asdict

    from draftlab.drafter.checkpoint import load_drafter
    from draftlab.specopd.cost import measure_scoring, paper_cost_model

    work_root = Path(work_root)
    seqs = SequenceSet.from_dataframe(df)
    d0 = load_drafter(base_drafter, target)
    S = d0.block_size
    W = scfg.branch_width or S - 1
    if W > S - 1:
        raise DraftlabError(f"specopd.branch_width={W} exceeds the drafter's {S - 1} proposals per block "
                            f"(block size {S}); use at most {S - 1} or 0 (= block size − 1)")
    store, _ = FeatureStore.open_or_build(Path(feature_root or work_root / "features"), target, seqs,
                                          d0.target_layer_ids, log=log)
    train_keys = {k: v for k, v in asdict(scfg).items() if k not in ("resume", "checkpoint_every", "baselines",
                                                                     "cost_anchors", "cost_sequences", "tv_eval_seqs")}
    key = run_key(seqs.fingerprint(), file_digest(Path(base_drafter)), train_keys)
    arms = ["specopd"] + [a for a in scfg.baselines if a != "specopd"]
    tv_before = heldout_tv(d0, target, seqs, scfg, W)  # the shared initialisation at T=1
    results: dict[str, ArmResult] = {}
    best_drafter = None
    for arm in arms:
        d = load_drafter(base_drafter, target).train()
        steps = scfg.max_steps if arm == "specopd" else (scfg.baseline_max_steps or scfg.max_steps)
        results[arm] = train_arm(d, seqs, scfg, arm, work_root / "runs" / key / arm, target, store, steps,
                                 scfg.max_minutes, validate_first=arm == "specopd",
                                 logger=logger if arm == "specopd" else None, log=log)
        if arm == "specopd":
            best_drafter = d
        else:
            del d
    main = results["specopd"]
    primary = "heldout" if "heldout" in main.final else next(iter(main.final))
    before = main.before or {}
    tau = lambda res, name: (res or {}).get(name, {}).get("sim_tau")  # noqa: E731
    arm_rows = {a: {"steps": r.steps, "sim_tau_final": tau(r.final, primary), "sim_tau_best": r.best_sim_tau,
                    "best_step": r.best_step, "per_set_final": {k: v["sim_tau"] for k, v in r.final.items()},
                    "supervised_positions": r.supervised_positions, "supervised_per_s": r.supervised_per_s,
                    "train_minutes": r.train_seconds / 60.0, "last_loss": r.last_terms.get("loss"),
                    "last_mean_alpha": r.last_terms.get("mean_alpha"), "resumed_from_step": r.resumed_from_step,
                    "tv_final": r.tv_final, "tau_t1_surrogate_final": r.tv_final.get("tau_t1_surrogate")}
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
        "baselines": {a: row for a, row in arm_rows.items() if a != "specopd"},
        "specopd": arm_rows["specopd"],
        "supervised_per_s": main.supervised_per_s,
        "supervised_per_s_sequential": seq_rate,
        "supervised_per_s_ratio_vs_sequential": (main.supervised_per_s / seq_rate) if seq_rate else None,
        "tv_before": tv_before, "tau_t1_surrogate_before": tv_before.get("tau_t1_surrogate"),
        "tau_t1_surrogate_final": main.tv_final.get("tau_t1_surrogate"),
        "scoring_cost": cost,
        "scoring_cost_paper_example": paper_cost_model(),
        "branch_width": W, "anchors_per_seq": scfg.anchors_per_seq, "batch_size": scfg.batch_size,
        "temperature": scfg.temperature, "block_size": S, "draft_vocab_size": d0.spec.draft_vocab_size,
    }
    if report["sim_tau_before"] and report["sim_tau_after"]:
        report["sim_tau_gain_pct"] = 100.0 * (report["sim_tau_after"] / report["sim_tau_before"] - 1.0)
    names = sorted({k for row in main.history for k in row} - {"step", "train_minutes"})
    curve = [{"step": r["step"], "train_minutes": r["train_minutes"], **{n: r.get(n) for n in names}} for r in main.history]
    return SpecOPDOutcome(best_drafter, report, curve, results)
