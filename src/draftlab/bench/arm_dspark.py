"""Benchmark arms `dspark` and `domino`: the sequential correctors DCOCO is compared with (SPEC §2.4).

Each decodes with the co-trained drafter and its sequential corrector read from the corrector stage's
outputs, `<root>/<arm>/drafter` and `<root>/<arm>/corrector` (root = `ctx.extra["corrector_root"]`,
default models/corrector), proposing slot by slot (`SequentialProposal`). Proposals are deterministic,
so at T>0 the verifier applies the point-mass rule. Importing `draftlab.bench.arm_dspark` or
`draftlab.bench.arm_domino` registers both.
"""
from __future__ import annotations

from draftlab.bench.arm_dcoco import variant_folder
from draftlab.bench.arms import ArmContext, SpeculativeArm, register_arm

SEQUENTIAL_ARMS = ("dspark", "domino")  # arm name = checkpoint variant


def sequential_arm(name: str, ctx: ArmContext) -> SpeculativeArm:
    from draftlab.corrector.proposal import SequentialProposal
    from draftlab.corrector.sequential import load_sequential

    folder = variant_folder(name, name, ctx)
    drafter = ctx.drafter(str(folder / "drafter"))
    prop = SequentialProposal(load_sequential(folder / "corrector", drafter))
    return SpeculativeArm(name, ctx.target, drafter, prop, ctx.pad_id, ctx.cfg.compact_threshold)


for _name in SEQUENTIAL_ARMS:
    register_arm(_name, lambda ctx, name=_name: sequential_arm(name, ctx))
