"""The target (verifier) model: loading, KV caches with explicit masks, taps, packed tree scoring."""
from draftlab.target.model import TargetModel, TargetOutput, additive_mask, causal_mask, crop_cache  # noqa: F401
from draftlab.target.streams import StreamCache  # noqa: F401
