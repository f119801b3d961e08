"""The record of one corrector family: everything the rest of draftlab needs to know about it, in one place.

A family (DCOCO, DSpark, Domino, DFlash-2's selector, or one from another package) is a module that defines its
corrector class and, at its end, its record(s): `FAMILY = Family(...)` (or `FAMILIES = (...)` for a module with
several). The registry (`draftlab.corrector.families`) lists the built-in family modules and reads the extra ones
that `corrector.family_modules` names; the co-training recipe, the plan, the arm grammar, the configuration's checks
and the explorer's colours iterate the records instead of branching on names.

What a record holds:
- `name`, `module`; `arch` (its architecture dataclass, saved as config.json) and `format` (config.json's `format`);
- `config`: its settings' dataclass, the params subsection `corrector.families.<name>` (plain Python: the
  configuration builds it from the records it is handed, `check(prefix)` validates it);
- `build(section, drafter, variant, k)`: a fresh corrector for a `Variant` row (the registry seeds torch first);
  `load(arch, drafter)`: the module of a saved architecture around `drafter` (the registry loads the weights);
- `variants`: its rows of the variant table (`draftlab.corrector.variants.Variant`); `losses`: the loss kinds it has;
- `budget`: "main" (trains on the corrector section's full budget, like the main variant: the baselines the paper
  compares with) or "ablation" (on the ablations' budget unless it is the main variant);
- `rules(section)`: its path rules, the first one the rule it decodes and validates with by default; `lam(section)`:
  the geometric rule's λ (the proposal step's argument; families without that rule ignore it);
- `cost(section, shape)`: what `draftlab plan` counts for it (`Cost`: parameters, activation width per candidate, forward
  FLOPs per drafted block);
- `arms`: its entries of the arm grammar, method -> option -> `ArmEntry` (the variant it decodes, the rule, the
  variant at T>0 where another, the walk at T>0 — the point mass, or `sampled`: the family's `Corrector.sample`,
  `draftlab.corrector.walks` —, the explorer's colour).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable

from draftlab.corrector.base import OFFERS, PAIR_ROWS, SAMPLED_WALK, Contract, Corrector
from draftlab.corrector.variants import Variant


class ArchDict:
    """config.json <-> a checkpoint's architecture dataclass (unknown keys, e.g. `info`, are ignored): every family's
    `arch` derives from it."""

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict):
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


@dataclass(frozen=True)
class ArmEntry:
    """One option of the arm grammar that decodes a corrector variant (`draftlab.arms.grammar.corrector_arm`)."""

    variant: str  # the corrector stage's variant whose drafter + corrector the arm decodes
    rule: str = "greedy"  # the path rule of the proposal step
    sampled: str = ""  # the variant decoded at T>0 ("" = the same)
    walk: str = ""  # "" = the point-mass proposal at every temperature; "sampled" = the sampled walk at T>0
    colour: str = ""  # the explorer's colour of the plain-drafter arm ("" = one from the name's hash)


@dataclass(frozen=True)
class Shape:
    """The sizes a corrector's cost depends on (what `draftlab plan` knows before any model exists)."""

    hidden: int  # H: the drafter's hidden width (the target's)
    vocab: int  # V: target ids
    draft_vocab: int  # Vd: the drafter's draft vocabulary
    embed_dim: int  # De: the target's embedding width
    k: int  # candidates per slot (corrector.k)
    slots: int = 15  # n: proposed slots per block (the drafter's block size − 1)


@dataclass(frozen=True)
class Cost:
    """What `draftlab plan` counts for a corrector: its trainable parameters and, per candidate (or slot) of a
    co-training step, the fp32 activation values it keeps (times 4 for the forward / backward copies)."""

    params: int
    activation_width: int
    # the corrector's forward FLOPs on one drafted block of `Shape.slots` slots (a co-training step: ~3x per block,
    # forward and backward): what sets its step time beside the drafter's (LiLiCorr's lattice transformer is not
    # DCOCO's MLP); 0 = not counted
    flops_per_block: float = 0.0


def greedy_only(section: Any) -> tuple[str, ...]:
    return ("greedy",)


def no_lam(section: Any) -> float:
    return 0.75


@dataclass(frozen=True)
class Family:
    name: str
    module: str
    arch: type
    format: str
    config: type
    build: Callable[[Any, Any, Variant, int], Any]
    load: Callable[[Any, Any], Any]
    variants: tuple[Variant, ...]
    cost: Callable[[Any, Shape], Cost]
    budget: str = "ablation"  # main | ablation
    losses: tuple[str, ...] = ("joint",)
    rules: Callable[[Any], tuple[str, ...]] = greedy_only
    lam: Callable[[Any], float] = no_lam
    arms: dict[str, dict[str, ArmEntry]] = field(default_factory=dict)
    # a rule on corrector.k the family needs (LiLiCorr: a power of two <= 16), checked with the params when one of
    # its variants is listed: (k, key) -> None, or a DraftlabError in one line
    k_rule: Callable[[int, str], None] | None = None
    corrector: type | None = None  # its Corrector class: its `CONTRACT` is the family's contract (None: the default)

    @property
    def contract(self) -> Contract:
        """What the family's correctors read and offer (`draftlab.corrector.base.Contract`)."""
        return self.corrector.CONTRACT if self.corrector is not None else Contract()

    def section(self, ccfg: Any) -> Any:
        """This family's settings from a corrector section: its `families.<name>` entry as the family's dataclass
        (typed and checked by the configuration when it was handed the records; built from the raw mapping, or the
        defaults, otherwise)."""
        s = (getattr(ccfg, "families", None) or {}).get(self.name)
        return s if isinstance(s, self.config) else self.config(**dict(s or {}))

    def check(self) -> None:
        c = self.contract
        for offer, method in OFFERS.items():  # a capability declared is one its class implements
            if offer in c.offers and self.corrector is not None and \
                    getattr(self.corrector, method, None) in (None, getattr(Corrector, method, None)):
                raise ValueError(f"family {self.name}: its contract offers {offer}, but {self.corrector.__name__} "
                                 f"does not define {method}(); define it or drop {offer} from its CONTRACT")
        for method, options in self.arms.items():
            for option, e in options.items():
                if e.walk == "sampled" and SAMPLED_WALK not in c.offers:
                    raise ValueError(f"family {self.name}: arm {method}-{option or 'sampled'} walks sampled, but its "
                                     f"contract does not offer {SAMPLED_WALK}")
                if e.rule.startswith("tree") and PAIR_ROWS not in c.offers:
                    raise ValueError(f"family {self.name}: arm {method}-{option} ranks a tree by pair rows, but its "
                                     f"contract does not offer {PAIR_ROWS}")
        if self.budget not in ("main", "ablation"):
            raise ValueError(f"family {self.name}: budget {self.budget!r} must be main or ablation")
        for v in self.variants:
            v.check()
            if v.family != self.name or v.loss not in self.losses:
                raise ValueError(f"family {self.name}: variant {v.name} names family {v.family!r} / loss {v.loss!r} "
                                 f"(its losses: {', '.join(self.losses)})")
