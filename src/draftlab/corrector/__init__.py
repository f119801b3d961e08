"""DCOCO: contextual correction of parallel drafts (SPEC §2) — scorer, path rules, loss, proposal step."""
from draftlab.corrector.loss import CorrectorLoss, corrector_loss, label_indices, transition_weights  # noqa: F401
from draftlab.corrector.model import (  # noqa: F401
    CorrectorSpec, DCOCOCorrector, corrector_inputs, count_parameters, draft_candidates, load_corrector,
    read_corrector_spec, save_corrector, spec_from_config,
)
from draftlab.corrector.paths import RULES, greedy_path, path_tokens, select_path, viterbi_path  # noqa: F401
