"""The pipeline layer: one recipe per DVC stage — what the stage does, as a function of its config
sections, the loaded inputs and the folders it may write under. The thin scripts in stages/ read
params.yaml, load inputs, call a recipe here and write the declared outputs. A method's recipe is a room
(a folder) beside its model package; what every stage shares sits in this folder's own modules.

- `reference/`: the target writes the references to the prompts `draftlab.data.references` selects
  (recipe, shards of an interrupted run, the OpenAI-compatible engine);
- `pretrain/`: references -> feature cache -> a trained DFlash drafter (recipe), and the seeded drafter (seeded);
- `specopd/`: SpecOPD and its baseline objectives from the base drafter (recipe, its Lightning module);
- `corrector/`: every corrector variant co-trained from its base drafter, the dflash-long control (recipe,
  co-training module, evaluation, its share of a round);
- `benchmark`: the arms of the arm table on the eval suites + report (measurement: draftlab.bench);
- shared: `stage` (the stage scripts' helpers: main, reports, logs, inputs), `layout` (what the stages derive
  from the paths table), `common` (the feature cache), `names` (the name tables params are checked against).
Import from the submodules.
"""
