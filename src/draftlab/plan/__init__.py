"""The cost plan (`draftlab plan`): what a composition will cost per stage before anything runs.

- `draftlab.plan.arch`: the target's numbers (preset `target.arch` or a config.json) and the drafter's shape;
- `draftlab.plan.memory`: the peak device memory of each stage's largest step, as named terms;
- `draftlab.plan.stages`: tokens, FLOPs, time, memory and disk per stage, and the fit check;
- `draftlab.plan.report`: the table, the JSON, and the check `check_params` runs for the run's own device;
- `draftlab.plan.suites`: the benchmark suites' prompt counts, from the loader the benchmark uses;
- `draftlab.plan.calibrate`: predicted against a committed run's measured stage times, and the fit of the cpu
  preset's constants (docs/plan.md).
"""
