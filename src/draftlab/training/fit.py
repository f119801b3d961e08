"""The one fit driver of every training job: Lightning Trainer setup, resume, final validation and the
`TrainResult`, written once.

`fit(module, dm, cfg, workdir, ...)` builds the Trainer (CPU or one GPU; or DDP over
`trainer.devices` x `trainer.num_nodes` processes, `draftlab.training.dist`; precision, validation
cadence, gradient clipping, `LastCheckpoint`: written by rank 0), resumes from `workdir/last.ckpt` when present (the
step count, optimiser, schedule, training clock, history and best state all continue), optionally
validates before training, fits, and validates the last step when it was not validated.

What a resume promises (docs/decisions.md "Resume is the same run"): under a step or epoch budget
(`max_minutes` = 0), a run killed after a checkpoint and resumed is the uninterrupted run — the same batches
(`draftlab.training.data`: batch g is a function of the seed and g), the same validation steps, and the same loss
curve, held-out curve, weights and budget-curve rows (only the clock's columns differ) — because a checkpoint is
written after its step's validation when that step validates, and everything the reports are made of (counters,
history, best state, curves, the loader's position) is in it. Under a minute budget the clock decides the schedule
and the stop: the resumed run reads the same batch at each step, but its learning rate and last step follow its
own clock (`TrainResult.resume_exact` False).
`train(...)` then loads the best state into the model(s) and assembles the `TrainResult`.
Lightning's banners and tips are silenced: a stage log is the stage's own lines.
"""
from __future__ import annotations

import json
import logging
import math
import os
import random
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import lightning as L
import numpy as np
import torch
from lightning.pytorch.strategies import DDPStrategy

from draftlab.config import PretrainConfig, TrainerConfig
from draftlab.errors import DraftlabError
from draftlab.training import dist
from draftlab.training.data import DrafterDataModule
from draftlab.training.module import TrainModule


def quiet_lightning() -> None:
    """Silence Lightning's info banners ("GPU available", the 💡 Tip, "`Trainer.fit` stopped") and a
    torch-internal deprecation notice it triggers; real warnings still show."""
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)` is deprecated.*")
    # under DDP every rank validates every set (the same figures on each): nothing to sync
    warnings.filterwarnings("ignore", message=r".*when logging on epoch level in distributed setting.*")


class LastCheckpoint(L.Callback):
    """Writes workdir/last.ckpt (atomically) every `every` steps, every `seconds` of wall time (0 = off: the runner
    under a deadline loses at most that much of a killed stage), at the end of training and when training is
    interrupted, so a re-run resumes where it stopped. Every rank takes part in saving (Lightning writes on rank 0
    and waits for all); rank 0 alone moves the file into place, and writes beside it `progress.json` (step, training
    seconds, the validation history, the best step): the figures so far of a run cut short, readable without torch.

    A checkpoint step that also validates (`val_every`: the Trainer's cadence, one optimiser step per batch) is
    written after that validation, not at the batch's end: a checkpoint written before it would lack the step's
    history row, best state and last metrics, and a run resumed from it would never validate that step (the
    resumed loop starts at the next batch) — its budget-curve row went missing."""

    def __init__(self, path: Path, every: int, val_every: int = 0, seconds: float = 0.0):
        self.path, self.every, self.val_every, self.seconds = Path(path), every, val_every, seconds
        self.pending: int | None = None  # a checkpoint step waiting for its validation
        self.t_saved = time.monotonic()

    def _save(self, trainer: L.Trainer) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        trainer.save_checkpoint(tmp, weights_only=False)  # full state (optimiser, loops) for resuming
        self.t_saved = time.monotonic()
        if trainer.is_global_zero:
            os.replace(tmp, self.path)
            self._progress(trainer)

    def _progress(self, trainer: L.Trainer) -> None:
        m = trainer.lightning_module
        best = getattr(m, "best", None) or {}
        doc = {"step": int(trainer.global_step), "train_seconds": float(getattr(m, "train_seconds", 0.0)),
               "best_step": best.get("step"), "best_sim_tau": best.get("sim_tau"),
               "last_loss": (getattr(m, "loss_curve", None) or [None])[-1],
               "history": list(getattr(m, "history", [])), "saved": time.time()}
        tmp = self.path.with_name("progress.json.tmp")
        tmp.write_text(json.dumps(doc, default=str))
        os.replace(tmp, self.path.with_name("progress.json"))

    def on_train_start(self, trainer, pl_module) -> None:
        self.t_saved = time.monotonic()

    def _due(self, trainer: L.Trainer) -> bool:
        if self.every and trainer.global_step % self.every == 0:
            return True
        if not self.seconds:
            return False
        late = time.monotonic() - self.t_saved >= self.seconds
        # every rank must take part in a save: under DDP rank 0's clock decides for all
        return bool(trainer.strategy.broadcast(late, src=0) if trainer.world_size > 1 else late)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if self._due(trainer):
            if self.val_every and step % self.val_every == 0:
                self.pending = step  # saved in on_validation_end, with this step's validation in it
            else:
                self._save(trainer)

    def on_validation_end(self, trainer, pl_module) -> None:
        if self.pending is not None and self.pending == trainer.global_step and not trainer.sanity_checking:
            self.pending = None
            self._save(trainer)

    def on_train_end(self, trainer, pl_module) -> None:
        self._save(trainer)

    def on_exception(self, trainer, pl_module, exception) -> None:
        if trainer.world_size > 1:  # saving waits for every rank, and the others may be gone
            return
        try:
            self._save(trainer)
        except Exception:  # best effort
            pass


@dataclass
class TrainResult:
    steps: int
    train_seconds: float
    wall_s: float
    slot_predictions: int
    slot_predictions_per_s: float
    uncovered_label_frac: float
    best_step: int
    best_sim_tau: float
    best_train_minutes: float
    best_metrics: dict  # per validation set: the validation summary at the best step
    last_metrics: dict
    history: list[dict] = field(default_factory=list)
    resumed_from_step: int | None = None
    # a resumed run: True when it is the uninterrupted run (a step or epoch budget: nothing depends on the clock),
    # False under a minute budget (the schedule and the last step follow the clock); None: not resumed
    resume_exact: bool | None = None
    before: dict | None = None  # per validation set before training (when validated first)
    extras: dict = field(default_factory=dict)  # the objective's own figures (`Objective.extras`)


def accelerator(device: torch.device) -> tuple[str, list[int] | int]:
    if device.type == "cuda":
        return "gpu", [device.index or 0]
    return "cpu", 1


def placement(device: torch.device, par: TrainerConfig) -> dict:
    """The Trainer's accelerator / devices / strategy / num_nodes: one process on `device` (today's
    run), or DDP over par.devices x par.num_nodes processes (each on its local rank's device; the
    process group is the launcher's, `draftlab.training.dist`)."""
    accel, devices = accelerator(device)
    if par.world == 1:
        return {"accelerator": accel, "devices": devices}
    dist.ensure_group(device.type)
    # find_unused_parameters: a co-training warm-up leaves the drafter's parameters without gradients
    strategy = StreamKeepingDDP(process_group_backend="nccl" if accel == "gpu" else "gloo",
                                find_unused_parameters=True)
    return {"accelerator": accel, "devices": par.devices, "num_nodes": par.num_nodes, "strategy": strategy}


class StreamKeepingDDP(DDPStrategy):
    """DDPStrategy whose setup leaves the random generators as they were: Lightning's re-seeds them
    (`reset_seed` to seed_everything's seed) at every fit / validate, which a one-process run does not,
    so a DDP run would draw other training anchors than the one-process run on the same global batch."""

    def setup_distributed(self) -> None:
        state = (random.getstate(), np.random.get_state(), torch.get_rng_state(),
                 torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None)
        super().setup_distributed()
        random.setstate(state[0])
        np.random.set_state(state[1])
        torch.set_rng_state(state[2])
        if state[3] is not None:
            torch.cuda.set_rng_state_all(state[3])


def budget_steps(cfg: PretrainConfig, dm: DrafterDataModule) -> int:
    """The step budget from max_steps and epochs (0 = none; max_minutes is checked while training)."""
    total = cfg.max_steps
    if cfg.epochs:
        by_epochs = math.ceil(cfg.epochs * dm.steps_per_epoch())
        total = min(total, by_epochs) if total else by_epochs
    return total


@dataclass
class Fitted:
    steps: int
    resumed_from_step: int | None  # the step a resumed run continued from (None: a fresh run)
    before: dict | None  # validation summaries before training (validate_first on a fresh run)


def fit(module: TrainModule, dm: DrafterDataModule, cfg: PretrainConfig, workdir: Path, logger=None,
        callbacks: list | None = None, log: Callable[[str], None] = print, what: str = "pretrain",
        validate_first: bool = False, log_every_n_steps: int | None = None) -> Fitted:
    """Fit `module` with resume from workdir/last.ckpt, then a final validation when the last step was
    not validated."""
    quiet_lightning()
    total = module.total_steps
    where = placement(module.drafter.device, dist.settings())
    precision = cfg.precision if cfg.precision != "auto" else ("bf16-mixed" if where["accelerator"] == "gpu" else "32-true")
    ckpt = workdir / "last.ckpt"
    every = log_every_n_steps or max(1, min(20, cfg.val_every or 20, dm.steps_per_epoch()))
    trainer = L.Trainer(
        **where, precision=precision, max_steps=total or -1, max_epochs=-1,
        val_check_interval=cfg.val_every or 10**9, check_val_every_n_epoch=None, num_sanity_val_steps=0,
        logger=logger if logger is not None else False, enable_checkpointing=False,
        callbacks=[LastCheckpoint(ckpt, cfg.checkpoint_every, cfg.val_every if dm.val_names else 0,
                                  cfg.checkpoint_seconds), *(callbacks or [])],
        gradient_clip_val=cfg.grad_clip or None, log_every_n_steps=every,
        enable_progress_bar=False, enable_model_summary=False, use_distributed_sampler=False,
        default_root_dir=str(workdir))
    resume = ckpt if (cfg.resume and ckpt.exists()) else None
    before = None
    if resume is None and validate_first:
        trainer.validate(module, datamodule=dm, verbose=False)  # step 0: the initial drafter
        before = dict(module.last_val)
    elif resume is not None:
        log(f"{what}: resuming from {resume}")
    module.start_step = -1  # set by on_train_start; stays -1 when a finished run is resumed
    trainer.fit(module, datamodule=dm, ckpt_path=str(resume) if resume else None, weights_only=True)
    steps = int(trainer.global_step)
    if not module.history or module.history[-1]["step"] != steps:
        trainer.validate(module, datamodule=dm, verbose=False)
    if module.best is None:
        raise DraftlabError("no validation blocks: the references are too short for the block size")
    resumed = (module.start_step if module.start_step >= 0 else steps) if resume is not None else None
    return Fitted(steps, resumed, before)


def train(module: TrainModule, dm: DrafterDataModule, cfg: PretrainConfig, workdir: str | Path, logger=None,
          callbacks: list | None = None, log: Callable[[str], None] = print, what: str = "pretrain",
          validate_first: bool = False, log_every_n_steps: int | None = None,
          before_restore: Callable[[], None] | None = None) -> TrainResult:
    """Fit (`fit`), load the best validation state into the trained model(s) and report. `before_restore`
    runs on the final state first (e.g. an evaluation of the last step)."""
    t0 = time.time()
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    f = fit(module, dm, cfg, workdir, logger, callbacks, log, what, validate_first, log_every_n_steps)
    if before_restore is not None:
        before_restore()
    module.restore_best()
    return TrainResult(
        steps=f.steps, train_seconds=module.train_seconds, wall_s=time.time() - t0,
        slot_predictions=module.counts.slot_predictions,
        slot_predictions_per_s=module.counts.slot_predictions / max(module.train_seconds, 1e-9),
        uncovered_label_frac=module.counts.uncovered / max(module.counts.labels_seen, 1),
        best_step=module.best["step"], best_sim_tau=module.best["sim_tau"],
        best_train_minutes=module.best["train_minutes"], best_metrics=module.best["metrics"],
        last_metrics=module.last_val, history=list(module.history), resumed_from_step=f.resumed_from_step,
        resume_exact=None if f.resumed_from_step is None else not cfg.max_minutes,
        before=f.before, extras=module.objective.extras())
