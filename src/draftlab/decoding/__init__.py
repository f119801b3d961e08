"""Decoding: the contract (`api`: Protocols of drafter, state, draft output, proposal step), one round of
speculative decoding as a function (`round`), the AR and speculative loops (`ar`, `speculative`) and the
one verification routine (`verify`)."""
from draftlab.decoding.api import (  # noqa: F401
    BlockInput, Drafter, DrafterProposal, DrafterState, DraftOutput, Proposal, ProposalStep, TracksStreams,
)
from draftlab.decoding.ar import generate_ar  # noqa: F401
from draftlab.decoding.common import GenerationResult, RoundRecord  # noqa: F401
from draftlab.decoding.round import RoundResult, speculative_round  # noqa: F401
from draftlab.decoding.speculative import SpeculativeEngine  # noqa: F401
from draftlab.decoding.verify import (  # noqa: F401
    SamplingParams, VerifyResult, greedy_accept_length, process_logits, sample_next, speculative_accept, verify_block,
)
