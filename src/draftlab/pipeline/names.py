"""The names the configuration checks but does not own, gathered from their packages for the callers that
validate params (the stages, the console script): the arm table's names (draftlab.arms.grammar) and the methods'
tables (the corrector's variants and path rules, SpecOPD's baselines). The configuration sits below the methods'
recipes and imports none of them; this is where the tables meet it."""
from __future__ import annotations

from draftlab.config import MethodNames


def method_names() -> MethodNames:
    from draftlab.corrector.variants import RULES, VARIANTS
    from draftlab.specopd.objectives import BASELINES

    return MethodNames(variants=VARIANTS, path_rules=RULES, baselines=BASELINES)


def arm_names() -> tuple[str, ...]:
    from draftlab.arms.grammar import arm_names as table

    return table()
