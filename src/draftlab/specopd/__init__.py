"""SpecOPD (SPEC §3): branch-parallel on-policy distillation of a parallel drafter.

`tree` samples branches after random response anchors and scores them all with one packed target
pass; `loss` is the E2E-TV objective (and the first-rejection ablation); `sequential` is the
Draft-OPD-style sequential loop it is compared with; `cost` the analytic and measured scoring cost.
Plain torch: Lightning and paths live in draftlab.training.specopd and stages/specopd.py.
"""
from draftlab.specopd.loss import e2e_tv_loss, e2e_tv_terms, first_rejection_mask, overlap  # noqa: F401
from draftlab.specopd.sequential import Rollout, sequential_rollout  # noqa: F401
from draftlab.specopd.tree import (  # noqa: F401
    Trunk, branch_lengths, branch_target_logits, branch_uniforms, prefix_mask, reference_branches, sample_branch_anchors,
    sample_branches, trunk_pass,
)
