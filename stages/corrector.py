"""Stage corrector: DCOCO co-training of drafter + corrector, its variants, baselines and the dflash-long control.
The stage's body is draftlab.pipeline.steps.corrector (its docstring says what it reads and writes); this script is
what dvc.yaml runs (written from the stage table, draftlab.pipeline.table)."""
from __future__ import annotations

from draftlab.pipeline.stage import stage_main  # first: it sets OpenMP's wait policy before torch (draftlab.omp)
from draftlab.pipeline.steps.corrector import run

if __name__ == "__main__":
    raise SystemExit(stage_main("corrector", run, distributed=True))
