"""The offline regime runner: the pipeline's stages in order on a machine with no network and no package index
(an accelerator lent for one prepared command), without DVC or MLflow.

- `pack`: what such a machine lacks, each piece ≤ 64 MiB, in one folder (`make gpu-pack`): the prompts the
  profile selects (the packaged suites' files, ShareGPT reduced to the selected conversations), the pure-Python
  wheels (OmegaConf, Hydra, antlr4, gguf) and the target GGUF in parts, with a manifest of sha256s; on arrival
  every piece is checked and the GGUF joined (`install`).
- `runner`: composes the profile, runs each stage's `run(params)` (draftlab.pipeline.steps, in the stage table's
  order) in a work folder and writes the results bundle after every stage (`make gpu-run`, `make gpu-run-dry`).
- `bundle`: the results bundle (≤ 8 files of ≤ 16 MiB: bundle.json, the reports, the curves, the log).
- `render`: folds a bundle into results/<profile>/ and metrics/<profile>/ of this repository.

Module tops import the standard library only: the runner must start before the packed wheels are on sys.path.
docs/gpu.md "The regime run (gpu-small)"; docs/decisions.md "The offline regime runner (2026-12-05)".
"""
