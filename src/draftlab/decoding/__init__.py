"""Decoding engines (autoregressive and speculative) and the one verification routine."""
from draftlab.decoding.ar import generate_ar  # noqa: F401
from draftlab.decoding.common import GenerationResult, RoundRecord  # noqa: F401
from draftlab.decoding.speculative import DrafterProposal, Proposal, ProposalStep, SpeculativeEngine  # noqa: F401
from draftlab.decoding.verify import (  # noqa: F401
    SamplingParams, VerifyResult, greedy_accept_length, process_logits, sample_next, speculative_accept, verify_block,
)
