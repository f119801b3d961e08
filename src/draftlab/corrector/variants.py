"""The corrector package's name lists: path rules and the trained variants (what each one is).

Plain Python (no torch), so the configuration can check names against them cheaply. A new variant is
one `Variant` row here (plus, for a new family, its class in `draftlab.corrector.families`).
"""
from __future__ import annotations

from dataclasses import dataclass

RULES = ("greedy", "globalsum", "geometric")  # DCOCO's path rules (draftlab.corrector.paths)
SEQUENTIAL = ("dspark", "domino", "dflash2")  # slot-by-slot walks: SPEC §2.4's baselines, DFlash-2's selector


@dataclass(frozen=True)
class Variant:
    """One trained corrector variant of the corrector stage."""

    name: str
    family: str  # dcoco | dspark | domino | dflash2: which corrector class
    ablation: str = ""  # DCOCO's architecture switch: dcoco | nopair | nocand | frozen ("" for the others)
    base: str = "pretrained"  # the drafter it starts from: pretrained | specopd
    frozen: bool = False  # the drafter is not trained (the frozen-backbone ablation)

    @property
    def sequential(self) -> bool:
        return self.family in SEQUENTIAL


TABLE: dict[str, Variant] = {v.name: v for v in (
    Variant("dcoco", "dcoco", "dcoco"),
    Variant("nopair", "dcoco", "nopair"),  # without the pair state s_p
    Variant("nocand", "dcoco", "nocand"),  # without the candidate (slot) state g_i
    Variant("frozen", "dcoco", "frozen", frozen=True),  # the drafter held fixed
    Variant("specopd-dcoco", "dcoco", "dcoco", base="specopd"),  # the composed product
    Variant("dspark", "dspark"),
    Variant("domino", "domino"),
    Variant("dflash2", "dflash2"),  # DFlash-2's candidate selector (draftlab.corrector.selector)
)}
VARIANTS = tuple(TABLE)
