"""Registers the `specopd-dcoco` benchmark arm (all DCOCO arms live in draftlab.bench.arm_dcoco)."""
from draftlab.bench import arm_dcoco  # noqa: F401  (registers on import)
