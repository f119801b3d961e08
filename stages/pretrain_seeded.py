"""Stage pretrain_seeded: the seeded drafter, trained beside the plain one.
The stage's body is draftlab.pipeline.steps.pretrain_seeded (its docstring says what it reads and writes); this script is
what dvc.yaml runs (written from the stage table, draftlab.pipeline.table)."""
from __future__ import annotations

from draftlab.pipeline.stage import stage_main  # first: it sets OpenMP's wait policy before torch (draftlab.omp)
from draftlab.pipeline.steps.pretrain_seeded import run

if __name__ == "__main__":
    raise SystemExit(stage_main("pretrain_seeded", run, distributed=True))
