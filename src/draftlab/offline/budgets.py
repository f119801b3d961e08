"""The minute budgets of the offline runner's training stages (`draftlab.offline.runner`): read (`minutes_of`), set
(`with_minutes`), predicted by `draftlab plan` on the run's device (`predictions`) and scaled together to fit what is
left before the deadline (`fit_budgets`)."""
from __future__ import annotations

import copy
import sys

from draftlab import paths

BUDGET_FLOOR = 0.25  # a training stage's minutes are never scaled below this share of the configured ones
# the minute budgets of the training stages, scaled together to fit a deadline (dotted keys of the params)
BUDGETS = {"pretrain_drafter": ("pretrain.max_minutes",), "pretrain_seeded": ("seeded.pretrain.max_minutes",),
           "specopd": ("specopd.max_minutes",), "corrector": ("corrector.max_minutes", "corrector.variant_max_minutes")}

def _get(params, key: str):
    obj = params
    for part in key.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else getattr(obj, part, None)
    return obj


def minutes_of(params, stage: str) -> dict[str, float]:
    """{dotted key: minutes} of a training stage's budgets (the seeded drafter's: pretraining's unless overridden)."""
    out = {}
    for key in BUDGETS.get(stage, ()):
        v = _get(params, key)
        if v is None and key == "seeded.pretrain.max_minutes":
            v = params.pretrain.max_minutes
        out[key] = float(v or 0.0)
    return out


def with_minutes(params, minutes: dict[str, float]):
    """A copy of `params` with the given budgets (dotted keys)."""
    p = copy.deepcopy(params)
    for key, v in minutes.items():
        *head, last = key.split(".")
        obj = _get(p, ".".join(head))
        if isinstance(obj, dict):
            obj[last] = v
        else:
            setattr(obj, last, v)
    return p


def predictions(params, kind: str) -> dict[str, dict]:
    """{stage: {"s": predicted seconds, "budget_s": the part that is minute budgets}}: the plan's eager time model
    on a device of `kind` (draftlab.plan; its assumptions in docs/gpu.md "The cost plan"); {} when it cannot tell."""
    try:
        from draftlab.plan.arch import target_shape
        from draftlab.plan.stages import BUDGET_TERM, Device, plan

        stages = plan(params, target_shape(params.target, paths.TARGET), Device.of(kind))
    except Exception as e:  # noqa: BLE001 (the plan is advice here: the run goes on without it)
        print(f"[gpu-run] no plan for the deadline ({type(e).__name__}: {e})", file=sys.stderr)
        return {}
    return {s.name: {"s": s.hours * 3600, "budget_s": s.times.get(BUDGET_TERM, 0.0)} for s in stages}


def fit_budgets(name: str, params, pred: dict, rest: list[str], left: float) -> tuple[dict[str, float], float]:
    """The minutes of training stage `name` that let it and the stages `rest` after it fit in `left` seconds by the
    plan: every training stage's budget scaled by one factor (≤ 1, ≥ BUDGET_FLOOR). Returns (minutes, factor)."""
    minutes = minutes_of(params, name)
    known = [pred[n] for n in [name, *rest] if n in pred]
    flex = sum(x["budget_s"] for x in known)
    fixed = sum(x["s"] - x["budget_s"] for x in known)
    if not flex or fixed + flex <= left:
        return minutes, 1.0
    f = min(1.0, max(BUDGET_FLOOR, (left - fixed) / flex))
    return {k: round(v * f, 3) for k, v in minutes.items()}, f
