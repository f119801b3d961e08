"""The pipeline layer: each DVC stage's body (`steps.<stage>.run`, which `python -m draftlab.pipeline <stage>`
— `__main__` — hands to `stage.stage_main`), the stage table that writes dvc.yaml (`table`, `dvcgen`), and what every stage shares. The
methods' recipes live one floor below, in draftlab.recipes (reference, pretrain, specopd, corrector).

- `steps/`: one module per stage, its `run(params)`: read the sections, load the inputs, call a recipe, write the
  declared outputs;
- `benchmark`: the arms of the arm grammar on the eval suites + report (measurement: draftlab.bench);
- `toy/`: the toy world's measured properties and its report (they run the benchmark);
- shared: `stage` (stage_main, reports, logs, inputs), `trace` (what a stage imported and read, in the smoke run),
  `layout` (what the stages derive from the paths table), `names` (the name tables params are checked against),
  `worlds` (a world's own DVC folder).
Import from the submodules.
"""
