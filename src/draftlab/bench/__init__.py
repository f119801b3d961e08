"""The benchmark library: arm registry, runner (suites × temperatures × arms, concurrency sweep),
metrics (τ, acceptance curve, tokens/s, speedup, round split, coverage, oracle τ, break-even τ),
simulated τ, and report writing."""
from draftlab.bench.arms import ARMS, ArmContext, ARArm, SpeculativeArm, build_arm, register_arm  # noqa: F401
from draftlab.bench.metrics import compute  # noqa: F401
from draftlab.bench.report import write_outputs  # noqa: F401
from draftlab.bench.runner import BatchRun, BenchRuns, PromptItem, run_benchmark  # noqa: F401
