"""Benchmark: the runner of the arms `draftlab.arms` builds (its names re-exported here), the interleaved runner (`runner`), metrics (τ, tokens/s, CIs,
coverage, oracle τ, break-even τ; `metrics`), simulated τ (`simulate`), a proposal step's share of a
round measured through the engine (`share`), and the written outputs (`report`)."""
from draftlab.arms.grammar import ARM_TABLE, ArmContext, ARArm, Checkpoints, SpeculativeArm, build_arm  # noqa: F401
from draftlab.bench.metrics import compute  # noqa: F401
from draftlab.bench.report import write_outputs  # noqa: F401
from draftlab.bench.runner import BatchRun, BenchRuns, PromptItem, run_benchmark  # noqa: F401
