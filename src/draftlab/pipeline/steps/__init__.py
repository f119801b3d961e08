"""Each stage's body: `draftlab.pipeline.steps.<stage>.run(params)`, one module per stage of the stage table
(draftlab.pipeline.table). The runner, `python -m draftlab.pipeline <stage>`, hands it to `stage_main` (parse, validate, threads, seed,
torchrun, one-line errors); the offline runner (draftlab.offline.runner) calls it directly. Import the submodules."""
