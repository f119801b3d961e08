"""Registers the `domino` benchmark arm (both sequential arms live in draftlab.bench.arm_dspark)."""
from draftlab.bench import arm_dspark  # noqa: F401  (registers on import)
