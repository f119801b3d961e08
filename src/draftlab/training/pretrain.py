"""Off-policy DFlash pretraining on the target's reference responses (docs/algorithms.md "Pretraining").

`train_drafter(...)` trains a drafter through the one training module with pretraining's objective (the
decay-weighted CE, `draftlab.training.ce.DrafterCE`) through the shared fit driver: resumable from
`workdir/last.ckpt`, a final validation, the best state loaded into the drafter, a `TrainResult`.
The stage recipe (references -> features -> a trained drafter + report) is
`draftlab.recipes.pretrain.recipe`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import lightning as L

from draftlab.config import PretrainConfig
from draftlab.drafter.model import DFlashDrafter
from draftlab.errors import DraftlabError
from draftlab.training.data import DrafterDataModule
from draftlab.training.features import FeatureStore, SequenceSet
from draftlab.training.fit import TrainResult, budget_steps, train
from draftlab.training.ce import DrafterCE
from draftlab.training.module import TrainModule


def train_drafter(drafter: DFlashDrafter, seqs: SequenceSet, cfg: PretrainConfig, workdir: str | Path,
                  store: FeatureStore | None = None, target=None, logger=None, callbacks: list | None = None,
                  log: Callable[[str], None] = print, train_sample: int = 16, val_labels: str = "greedy",
                  teacher=None) -> TrainResult:
    """Train `drafter` in place (it ends holding the best validation state) and report.
    val_labels: score validation blocks against the target's greedy tokens ("greedy", the real
    acceptance rule) or against the reference tokens ("reference"; the same for greedy references).
    teacher: a `training.distill.TapTeacher` for the distillation term (cfg.kd_weight > 0)."""
    if store is None and target is None:
        raise DraftlabError("train_drafter needs a FeatureStore or the target (features on the fly)")
    L.seed_everything(cfg.seed, workers=False, verbose=False)
    dm = DrafterDataModule(seqs, cfg, drafter.block_size, store, train_sample=train_sample, arch=drafter.arch)
    module = TrainModule(DrafterCE(drafter, cfg, target, val_labels, teacher), budget_steps(cfg, dm), dm.val_names)
    return train(module, dm, cfg, workdir, logger, callbacks, log, "pretrain")
