"""The target (verifier) model: loading, KV caches with explicit masks, taps, packed tree scoring."""
from draftlab.verifier.model import TargetModel, TargetOutput, causal_mask, crop_cache  # noqa: F401
from draftlab.verifier.streams import StreamCache  # noqa: F401
