"""The names the configuration checks but does not own, gathered from their packages for the callers that
validate params (the stages, the console script): the arm table's names (draftlab.arms.grammar) and the methods'
tables (the corrector's family records, SpecOPD's baselines). The configuration sits below the methods'
recipes and imports none of them; this is where the tables meet it."""
from __future__ import annotations

from typing import Iterator

from draftlab.config import MethodNames


def method_names() -> MethodNames:
    from draftlab.corrector.families import use, variant_table
    from draftlab.specopd.objectives import BASELINES

    return MethodNames(variants=tuple(variant_table()), baselines=BASELINES, families=use)


class ArmNames:
    """The arm table's names, read when they are used: after the corrector section's check has made the families that
    `corrector.family_modules` names this process's (`draftlab.corrector.families.use`), so their arms count too."""

    def _names(self) -> tuple[str, ...]:
        from draftlab.arms.grammar import arm_names as table

        return table()

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __contains__(self, name: object) -> bool:
        return name in self._names()

    def __len__(self) -> int:
        return len(self._names())


def arm_names() -> ArmNames:
    return ArmNames()
