"""The pipeline layer: one recipe per DVC stage — what the stage does, as a function of its config
sections, the loaded inputs and the folders it may write under. The thin scripts in stages/ read
params.yaml, load inputs, call a recipe here and write the declared outputs.

- `reference`: the target writes the references to the prompts `draftlab.data.references` selects;
- `pretrain_drafter`: references -> feature cache -> a trained DFlash drafter + report;
- `specopd`: SpecOPD and its baseline objectives from the pretrained drafter + report;
- `corrector`: every corrector variant co-trained from its base drafter, the dflash-long control + report;
- `benchmark`: the arms of the arm table on the eval suites + report (measurement: draftlab.bench).
Import from the submodules.
"""
