"""The drafter pretraining room: the plain DFlash drafter's recipe (`recipe`: references -> features -> the
paper's training, stage `pretrain_drafter`) and the seeded drafter's (`seeded`: the same recipe with the `seeded`
section's overrides, and its held-out comparison with the plain drafter and the lookup, stage `pretrain_seeded`).
The shared Lightning code is draftlab.training (pretrain, distill); the models are draftlab.drafter."""
