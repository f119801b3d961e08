"""The accelerator check as a library: one module per section, the timing harness and its sanity gates.

`python tools/gpu_check.py` (a thin script over `draftlab.checks.run.main`) runs every section on a CUDA device in
about five minutes; `--dry` runs the same code at tiny sizes on CPU. Modules:
- `common` (context, budgets, rounding, environment), `models` (random targets, drafters, correctors, prompts),
  `events` (CUDA-event clock, peak memory, GPU-busy sums for the training sections);
- `timing` (warm-up per arm, rotated order, median and p20, GPU-busy time) and `gates` (sanity gates, the AR step
  against the memory-bandwidth floor);
- sections: `kernels`, `engine`, `concurrency`, `seeded`, `specopd`, `scale` (`specopd_scale`), `flex`;
- `report` (docs/gpu.md's generated block) and `run` (the runner and its command line).
Nothing here imports OmegaConf, Hydra, MLflow, DVC or draftlab's configuration: the accelerator machine has none.
"""
