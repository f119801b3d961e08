"""Stage check_params: validates params.yaml and the run's memory / disk plan before any other stage runs.
The stage's body is draftlab.pipeline.steps.check_params (its docstring says what it reads and writes); this script is
what dvc.yaml runs (written from the stage table, draftlab.pipeline.table)."""
from __future__ import annotations

from draftlab.pipeline.stage import stage_main  # first: it sets OpenMP's wait policy before torch (draftlab.omp)
from draftlab.pipeline.steps.check_params import run

if __name__ == "__main__":
    raise SystemExit(stage_main("check_params", run))
