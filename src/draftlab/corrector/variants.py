"""The corrector package's name lists: path rules, loss kinds and the trained variants (what each one is).

Plain Python (no torch), so the configuration can check names against them cheaply. A new variant is
one `Variant` row in `TABLE` (plus, for a new family, its class in `draftlab.corrector.families`);
rows of different issues sit in their own blocks of the table so they can be added without conflict.

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
SEQUENTIAL = ("dspark", "domino", "dflash2")  # slot-by-slot walks: DSpark / Domino, DFlash-2's selector
LOSSES = ("joint", "cond", "reach")  # DCOCO's loss kinds (draftlab.corrector.loss)
BASES = ("pretrained", "specopd", "specopd-t1")  # base drafters: pretraining's, SpecOPD's greedy / T=1 state


@dataclass(frozen=True)
class Variant:
    """One trained corrector variant of the corrector stage."""

    name: str
    family: str  # dcoco | dspark | domino | dflash2: which corrector class
    ablation: str = ""  # DCOCO's architecture switch: dcoco | nopair | nocand | frozen ("" for the others)
    base: str = "pretrained"  # the drafter it starts from (BASES)
    frozen: bool = False  # the drafter is not trained (the frozen-backbone ablation)
    grad_hidden: float | None = None  # corrector-loss gradient weight into the drafter via h (None: config)
    grad_logits: float | None = None  # ... via the candidates' draft logits (None: config)
    frozen_warmup: float | None = None  # budget fraction with the drafter frozen first (None: config)
    loss: str = "joint"  # LOSSES (DCOCO only)

    @property
    def sequential(self) -> bool:
        return self.family in SEQUENTIAL

    def resolve(self, grad_hidden: float = 1.0, grad_logits: float = 1.0, frozen_warmup: float = 0.0) -> "Variant":
        """This row with the configured defaults filled in where it leaves a co-training setting open."""
        pick = lambda own, default: default if own is None else own  # noqa: E731
        return replace(self, grad_hidden=pick(self.grad_hidden, grad_hidden),
                       grad_logits=pick(self.grad_logits, grad_logits),
                       frozen_warmup=pick(self.frozen_warmup, frozen_warmup))

    def check(self) -> None:
        if self.base not in BASES:
            raise ValueError(f"variant {self.name}: base {self.base!r} is not one of {', '.join(BASES)}")
        if self.loss not in LOSSES or (self.loss != "joint" and self.family != "dcoco"):
            raise ValueError(f"variant {self.name}: loss {self.loss!r} needs the dcoco family and one of {LOSSES}")
        for k in ("grad_hidden", "grad_logits"):
            x = getattr(self, k)
            if x is not None and not 0.0 <= x <= 1.0:
                raise ValueError(f"variant {self.name}: {k}={x} must lie in [0, 1]")
        if self.frozen_warmup is not None and not 0.0 <= self.frozen_warmup < 1.0:
            raise ValueError(f"variant {self.name}: frozen_warmup={self.frozen_warmup} must lie in [0, 1)")


TABLE: dict[str, Variant] = {v.name: v for v in (
    # the paper's method, its ablations and the composed product (docs/algorithms.md "DCOCO", "Baselines and controls")
    Variant("dcoco", "dcoco", "dcoco"),
    Variant("nopair", "dcoco", "nopair"),  # without the pair state s_p
    Variant("nocand", "dcoco", "nocand"),  # without the candidate (slot) state g_i
    Variant("frozen", "dcoco", "frozen", frozen=True),  # the drafter held fixed
    Variant("specopd-dcoco", "dcoco", "dcoco", base="specopd"),  # on SpecOPD's best-greedy-τ state (T=0 arm)
    Variant("specopd-dcoco-t1", "dcoco", "dcoco", base="specopd-t1"),  # on its best-T=1 state (T=1 arm)
    Variant("dspark", "dspark"),
    Variant("domino", "domino"),
    Variant("dflash2", "dflash2"),  # DFlash-2's candidate selector (draftlab.corrector.selector)
    # co-training options (how the corrector loss reaches the drafter)
    Variant("dcoco-sg", "dcoco", "dcoco", grad_hidden=0.0, grad_logits=1.0),  # stop-gradient on the hidden path
    Variant("dcoco-lam0.3", "dcoco", "dcoco", grad_hidden=0.3, grad_logits=0.3),  # λ on both paths
    Variant("dcoco-lam0.1", "dcoco", "dcoco", grad_hidden=0.1, grad_logits=0.1),
    Variant("dcoco-lam0", "dcoco", "dcoco", grad_hidden=0.0, grad_logits=0.0),  # the drafter trains on its CE only
    Variant("dcoco-warm", "dcoco", "dcoco", frozen_warmup=0.3),  # drafter frozen for the first 30% of the budget
    # loss ablations (on the frozen backbone: the drafter cannot confound what the loss does)
    Variant("frozen-cond", "dcoco", "frozen", frozen=True, loss="cond"),
    Variant("frozen-reach", "dcoco", "frozen", frozen=True, loss="reach"),
    Variant("dcoco-cond", "dcoco", "dcoco", loss="cond"),
    Variant("dcoco-reach", "dcoco", "dcoco", loss="reach"),
)}
for _v in TABLE.values():
    _v.check()
VARIANTS = tuple(TABLE)
