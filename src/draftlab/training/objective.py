"""What a training job trains: the `Objective` the one training module drives (docs/architecture.md "One training path").

Each method supplies its objective from its own room — pretraining's decay-weighted CE (`draftlab.training.ce.DrafterCE`),
SpecOPD's objectives (`draftlab.recipes.specopd.module.SpecOPDObjective`), co-training (`draftlab.recipes.corrector.
cotrain.CoTrain`) — and `draftlab.training.module.TrainModule` owns what they share: the budget clock, the optimiser and
its schedule, the counters summed over ranks, validation's bookkeeping (history, best state, budget curve) and the
checkpoint. Per step the module hands the objective a `StepContext` and logs what its `StepOut` says; per validation
set it asks for fresh stats, feeds them every batch and asks for their summary; after a validation it lets the
objective add its own (a corrector's uncorrected τ, SpecOPD's T=1 evaluation).

Also here, what every objective reads: `lr_factor` (warm-up + cosine decay over the budget), `cpu_state` (the kept
best state), `global_ratio` (a ratio whose denominator is summed over data-parallel ranks) and `Counts`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from torch import Tensor, nn

from draftlab.config import PretrainConfig


def cpu_state(module: nn.Module) -> dict:
    """A CPU copy of a module's state dict."""
    return {k: v.detach().to("cpu", copy=True) for k, v in module.state_dict().items()}


def global_ratio(num: Tensor, den: Tensor) -> Tensor:
    """num / den with den summed over data-parallel ranks (docs/algorithms.md "The E2E-TV loss"): gradient averaging
    over W ranks then yields Σ_r num_r / Σ_r den_r, so a position's weight does not depend on its rank."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        d = den.detach().clone()
        dist.all_reduce(d)
        return num * dist.get_world_size() / d.clamp(min=1e-12)
    return num / den.clamp(min=1e-12)


def lr_factor(progress: float, warmup: float, schedule: str, min_ratio: float) -> float:
    """Multiplier of the base lr at a fraction `progress` of the budget."""
    p = min(max(progress, 0.0), 1.0)
    if warmup > 0 and p < warmup:
        return max(p, 1e-3 * warmup) / warmup
    if schedule == "constant":
        return 1.0
    q = (p - warmup) / max(1.0 - warmup, 1e-9)
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * q))


def decay_groups(module: nn.Module, weight_decay: float, **extra) -> list[dict]:
    """AdamW groups of a module's trainable parameters: weight decay on matrices only (`extra` in both groups)."""
    ps = [p for p in module.parameters() if p.requires_grad]
    return [{"params": [p for p in ps if p.ndim >= 2], "weight_decay": weight_decay, **extra},
            {"params": [p for p in ps if p.ndim < 2], "weight_decay": 0.0, **extra}]


@dataclass
class Counts:
    """Resumable counters an objective adds to in its step; the module sums each step's share over ranks."""

    slot_predictions: int = 0  # supervised draft positions
    labels_seen: int = 0  # supervised labels (slot 0 excluded)
    uncovered: int = 0  # ... outside the draft vocabulary

    def as_list(self) -> list[int]:
        return [self.slot_predictions, self.labels_seen, self.uncovered]


@dataclass
class StepContext:
    """What a training step may read of the run: its step, the budget spent, the clock, the counters to add to."""

    step: int  # the optimiser step this batch trains
    progress: float  # the fraction of the budget spent
    train_seconds: float
    lr: float  # the first parameter group's learning rate
    counts: Counts
    reduce: Callable[[Tensor], Tensor]  # a sum over data-parallel ranks (the tensor itself on one process)
    world: int  # data-parallel ranks


@dataclass
class StepOut:
    """A step's loss to backpropagate and what it logs (each under `train/`, at the batch's size)."""

    loss: Tensor
    logs: dict[str, Any] = field(default_factory=dict)
    synced: tuple[str, ...] = ()  # logs averaged over ranks (each rank's value is its share of a global ratio)


class Objective(Protocol):
    """A method's training, as the module drives it. `cfg`: the run settings (budget, optimiser, schedule, batches)."""

    cfg: PretrainConfig

    def modules(self) -> dict[str, nn.Module]:
        """The trained modules by name (their state dict keys' prefixes): the drafter first."""

    def param_groups(self) -> list[dict]:
        """AdamW's parameter groups (a group without `lr` takes cfg.lr)."""

    def lr_factor(self, group: dict, progress: float) -> float:
        """The multiplier of a group's lr at a fraction `progress` of the budget."""

    def step(self, batch: dict, ctx: StepContext) -> StepOut:
        """One training batch's loss."""

    def new_val_stats(self) -> Any:
        """Fresh counters for one validation set (with `.blocks`)."""

    def validate_batch(self, batch: dict, stats: Any) -> None:
        """One validation batch into `stats`."""

    def val_summary(self, stats: Any) -> dict:
        """One set's summary; its `sim_tau` selects the best state."""

    def after_validation(self, step: int, results: dict, row: dict | None, primary: str) -> None:
        """After a validation's figures are logged and the best state kept: the objective's own (row: the budget
        curve's row of this step, None when the step already had one)."""

    def snapshot(self) -> dict:
        """The trained state kept as the best one (CPU copies)."""

    def restore(self, state: dict) -> None:
        """Load a `snapshot` into the trained modules."""

    def extras(self) -> dict:
        """What the run reports beyond the common figures (`TrainResult.extras`)."""

    def state(self) -> dict:
        """The objective's resumable counters (saved in the checkpoint)."""

    def load_state(self, state: dict) -> None:
        """... and read back on resume."""
