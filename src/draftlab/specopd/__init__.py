"""SpecOPD (docs/algorithms.md "SpecOPD"): branch-parallel on-policy distillation of a parallel drafter (plain torch).

- `tree`: branches sampled after random response anchors, all scored with one packed target pass;
- `loss`: the E2E-TV objective (and the first-rejection ablation);
- `terms`: one update's loss terms for each objective of the comparison;
- `slots`: the drafter's q at the supervised slots, as the engine proposes from it (a seeded drafter's block
  input, seed bias and seed column);
- `draft_opd`: the Draft-OPD-style sequential rollout it is compared with (rounds of the engine's
  `speculative_round`);
- `cost`: the analytic and measured scoring cost; `objectives`: the objective names.
Lightning lives in draftlab.recipes.specopd.module, the stage recipe in draftlab.recipes.specopd.
Import from the submodules (this file imports nothing, so the name lists stay cheap to read).
"""
