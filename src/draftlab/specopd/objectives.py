"""The SpecOPD comparison's objective names (plain Python, so the configuration can check them cheaply).

`specopd` is the method; the baselines are trained for the same number of updates from the same
drafter (docs/algorithms.md "SpecOPD"). `sequential` is the Draft-OPD-style loop (`draftlab.specopd.draft_opd`).
"""
from __future__ import annotations

BASELINES = ("offpolicy_ce", "offpolicy_tv", "sequential", "first_rejection")
OBJECTIVES = ("specopd", "first_rejection", "offpolicy_tv", "offpolicy_ce", "sequential")
