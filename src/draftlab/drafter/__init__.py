"""The DFlash parallel drafter (docs/algorithms.md "DFlash"): model, block masks, draft vocabulary, checkpoints."""
from draftlab.drafter.checkpoint import load_drafter, save_drafter  # noqa: F401
from draftlab.drafter.masks import CONVENTION, default_gamma, slot_weights  # noqa: F401
from draftlab.drafter.arch import DrafterArch, DrafterDesign, arch_from_target, require_plain  # noqa: F401
from draftlab.drafter.model import DFlashDrafter, DraftOutput, DrafterState  # noqa: F401
from draftlab.drafter.vocab import build_draft_vocab, resolve_mask_token, token_counts  # noqa: F401
