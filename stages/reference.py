"""Stage reference: the target writes responses to the training / held-out / eval prompts.
The stage's body is draftlab.pipeline.steps.reference (its docstring says what it reads and writes); this script is
what dvc.yaml runs (written from the stage table, draftlab.pipeline.table)."""
from __future__ import annotations

from draftlab.pipeline.stage import stage_main  # first: it sets OpenMP's wait policy before torch (draftlab.omp)
from draftlab.pipeline.steps.reference import run

if __name__ == "__main__":
    raise SystemExit(stage_main("reference", run))
