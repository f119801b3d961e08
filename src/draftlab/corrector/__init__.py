"""Correctors of parallel drafts (docs/algorithms.md "DCOCO"): DCOCO and the sequential baselines DSpark /
Domino ("Baselines and controls").

- `base`: the one corrector interface (`Corrector`: propose, loss, save) that training, validation,
  the engine's proposal step and the checkpoints use for every family; `load_corrector` reads any;
- `dcoco`: the DCOCO transition scorer (docs/algorithms.md "Transition scores"); `paths`: its path rules;
  `loss`: its K² loss;
- `sequential`: DSpark and Domino, slot-by-slot walks;
- `proposal`: a trained corrector as the speculative engine's proposal step;
- `variants`: the trained variants and the path-rule names (plain Python).
Import from the submodules (this file imports nothing, so the name lists stay cheap to read).
"""
