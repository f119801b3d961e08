"""An analysis plan (`<run>/analysis_plan.yaml`; the template: worlds/analysis_plan.template.yaml): the pairs it
reads as primary (Holm at `alpha`) and as secondary (descriptive), the unit, the replicates it needs and the smallest
number of units a verdict may rest on. Fixed before the figures it reads exist (a world's freeze commits it); read
here with every key checked, a bad one in one line."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from draftlab.errors import DraftlabError

PLAN = "analysis_plan.yaml"
Pair = tuple[str, str, float]  # arm a, arm b, temperature: Δτ = τ(a) − τ(b)


@dataclass(frozen=True)
class Plan:
    path: str
    world_hash: str = ""
    fixed: str = ""
    alpha: float = 0.05
    unit: str = "prompt"
    replicates: int = 1
    min_units: int = 10
    multiplicity: str = "holm"
    speed: str = "descriptive"
    primary: tuple[Pair, ...] = ()
    secondary: tuple[Pair, ...] = field(default_factory=tuple)

    @property
    def pairs(self) -> tuple[Pair, ...]:
        return self.primary + self.secondary

    def arms_at(self) -> set[tuple[str, float]]:
        return {(arm, t) for a, b, t in self.pairs for arm in (a, b)}


def _pairs(raw, where: str) -> tuple[Pair, ...]:
    out = []
    for i, p in enumerate(raw or []):
        if not (isinstance(p, (list, tuple)) and len(p) == 3 and all(isinstance(x, str) for x in p[:2])
                and isinstance(p[2], (int, float)) and not isinstance(p[2], bool)):
            raise DraftlabError(f"{where}[{i}] = {p!r}: a pair is [arm a, arm b, temperature], e.g. [dcoco, dflash, 0]")
        out.append((p[0], p[1], float(p[2])))
    return tuple(out)


def read_plan(path: str | Path) -> Plan:
    import yaml

    path = Path(path)
    if not path.exists():
        raise DraftlabError(f"no analysis plan {path}: a verdict reads the pairs a plan fixed before the figures "
                            f"(copy worlds/analysis_plan.template.yaml and commit it before the run)")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise DraftlabError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    known = {f for f in Plan.__dataclass_fields__ if f != "path"}
    bad = sorted(set(raw) - known)
    if bad:
        raise DraftlabError(f"{path}: unknown keys {bad}; a plan has {sorted(known)}")
    plan = Plan(path=str(path), **{k: v for k, v in raw.items() if k not in ("primary", "secondary")},
                primary=_pairs(raw.get("primary"), f"{path}: primary"),
                secondary=_pairs(raw.get("secondary"), f"{path}: secondary"))
    if not plan.primary:
        raise DraftlabError(f"{path}: no primary pairs; a plan names the comparisons it was made for")
    if plan.multiplicity != "holm":
        raise DraftlabError(f"{path}: multiplicity={plan.multiplicity!r}; the workbench reads a primary family with holm")
    if not 0 < plan.alpha < 1 or plan.min_units < 2 or plan.replicates < 1:
        raise DraftlabError(f"{path}: alpha must lie in (0, 1), min_units >= 2, replicates >= 1")
    dup = {p for p in plan.pairs if plan.pairs.count(p) > 1}
    if dup:
        raise DraftlabError(f"{path}: pairs listed twice: {sorted(dup)}")
    return plan
