"""DCOCO: contextual correction of parallel drafts (SPEC §2) — scorer, path rules, loss, proposal step;
the sequential baselines DSpark and Domino (SPEC §2.4) live in draftlab.corrector.sequential."""
from draftlab.corrector.loss import CorrectorLoss, corrector_loss, label_indices, transition_weights  # noqa: F401
from draftlab.corrector.model import (  # noqa: F401
    CorrectorSpec, DCOCOCorrector, corrector_inputs, count_parameters, draft_candidates, load_corrector,
    read_corrector_spec, save_corrector, spec_from_config,
)
from draftlab.corrector.paths import RULES, greedy_path, path_tokens, select_path, viterbi_path  # noqa: F401
from draftlab.corrector.sequential import (  # noqa: F401
    SequentialCorrector, SequentialSpec, load_sequential, read_sequential_spec, save_sequential,
)
