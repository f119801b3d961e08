"""The stages' recipes, one room per method: `reference` (the target's own continuations, sharded and resumable),
`pretrain` (the plain and the seeded drafter), `specopd` (branch-parallel on-policy distillation) and `corrector`
(co-training every corrector family with its drafter, its evaluation and proposal share). `common` holds what they
share (run keys, file digests, the feature cache). The stages' bodies (draftlab.pipeline.steps) call them."""
