"""The corrector package's name lists (path rules, loss kinds, base drafters) and the row of a trained variant.

Plain Python (no torch). Each family's record (`draftlab.corrector.family.Family`) holds its variants' rows, at the end
of the family's module (DCOCO's in `draftlab.corrector.dcoco`); the registry (`draftlab.corrector.families`) gathers
them into the variant table. A new variant is one `Variant` row in its family's record.

How a co-trained variant's corrector loss reaches the drafter is part of its row:
- `grad_hidden` / `grad_logits`: the weight of the corrector loss's gradient into the drafter through
  the hidden-state path (the corrector's h_i inputs) and through the logit path (the candidates' draft
  logits); 1 = the paper's joint training, 0 = a stop-gradient on that path. None = the configured
  default (`corrector.grad_hidden` / `corrector.grad_logits`).
- `frozen_warmup`: the fraction of the budget during which the drafter is frozen and only the corrector
  trains, before joint training (None = `corrector.frozen_warmup`).
- `loss`: what the DCOCO loss supervises (`LOSSES`): `joint` = the paper's joint K² softmax (docs/algorithms.md
  "Training and co-training", the default); `cond` = the within-row choice only, b given the teacher's a*; `reach` = the
  within-row choice only on rows the greedy walk actually reaches (slot 1 = the drafter's top-1, every earlier
  transition chosen right).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

RULES = ("greedy", "globalsum", "geometric")  # DCOCO's path rules (draftlab.corrector.paths)
LOSSES = ("joint", "cond", "reach")  # DCOCO's loss kinds (draftlab.corrector.loss)
BASES = ("pretrained", "specopd", "specopd-t1")  # base drafters: pretraining's, SpecOPD's greedy / T=1 state


@dataclass(frozen=True)
class Variant:
    """One trained corrector variant of the corrector stage."""

    name: str
    family: str  # which family's record builds it (dcoco | dspark | domino | dflash2 | another package's)
    ablation: str = ""  # DCOCO's architecture switch: dcoco | nopair | nocand | frozen ("" for the others)
    base: str = "pretrained"  # the drafter it starts from (BASES)
    frozen: bool = False  # the drafter is not trained (the frozen-backbone ablation)
    grad_hidden: float | None = None  # corrector-loss gradient weight into the drafter via h (None: config)
    grad_logits: float | None = None  # ... via the candidates' draft logits (None: config)
    frozen_warmup: float | None = None  # budget fraction with the drafter frozen first (None: config)
    loss: str = "joint"  # LOSSES (the ones its family has: `Family.losses`)

    def resolve(self, grad_hidden: float = 1.0, grad_logits: float = 1.0, frozen_warmup: float = 0.0) -> "Variant":
        """This row with the configured defaults filled in where it leaves a co-training setting open."""
        pick = lambda own, default: default if own is None else own  # noqa: E731
        return replace(self, grad_hidden=pick(self.grad_hidden, grad_hidden),
                       grad_logits=pick(self.grad_logits, grad_logits),
                       frozen_warmup=pick(self.frozen_warmup, frozen_warmup))

    def check(self) -> None:
        if self.base not in BASES:
            raise ValueError(f"variant {self.name}: base {self.base!r} is not one of {', '.join(BASES)}")
        if self.loss not in LOSSES:
            raise ValueError(f"variant {self.name}: loss {self.loss!r} is not one of {LOSSES}")
        for k in ("grad_hidden", "grad_logits"):
            x = getattr(self, k)
            if x is not None and not 0.0 <= x <= 1.0:
                raise ValueError(f"variant {self.name}: {k}={x} must lie in [0, 1]")
        if self.frozen_warmup is not None and not 0.0 <= self.frozen_warmup < 1.0:
            raise ValueError(f"variant {self.name}: frozen_warmup={self.frozen_warmup} must lie in [0, 1)")
