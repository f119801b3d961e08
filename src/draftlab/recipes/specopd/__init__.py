"""SpecOPD's recipe room (its model room is `draftlab.specopd`): the branch-parallel on-policy distillation Lightning
module (`module`) and the stage's recipe (`recipe`: SpecOPD and its baseline objectives from the base drafter)."""
