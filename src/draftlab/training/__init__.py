"""Drafter training with Lightning, split by job: `data` (batches, validation sets), `features` (target
tap features, cached or on the fly), `module` (the drafter module base every job extends), `fit` (the
one fit driver: Trainer setup, resume, final validation, `TrainResult`), `pretrain`, `cotrain`
(drafter + corrector), `corrector_eval` (corrected vs uncorrected vs oracle τ), `specopd`, `metrics`.
The stage recipes that call these live in draftlab.pipeline."""
