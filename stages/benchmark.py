"""Stage benchmark: AR vs speculative arms on the eval suites, T=0 / T=1, and a concurrency sweep.
The stage's body is draftlab.pipeline.steps.benchmark (its docstring says what it reads and writes); this script is
what dvc.yaml runs (written from the stage table, draftlab.pipeline.table)."""
from __future__ import annotations

from draftlab import omp, paths

omp.configure(paths.PARAMS, decoding=True)  # first: a decoding process's wait policy, before torch (draftlab.omp)

from draftlab.pipeline.stage import stage_main  # noqa: E402  (its own configure keeps the policy set above)
from draftlab.pipeline.steps.benchmark import run  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(stage_main("benchmark", run))
