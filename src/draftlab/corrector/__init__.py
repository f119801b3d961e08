"""Correctors of parallel drafts (SPEC §2): DCOCO and the sequential baselines DSpark / Domino (§2.4).

- `base`: the one corrector interface (`Corrector`: propose, loss, save) that training, validation,
  the engine's proposal step and the checkpoints use for every family; `load_corrector` reads any;
- `dcoco`: the DCOCO transition scorer (SPEC §2.1); `paths`: its path rules; `loss`: its K² loss;
- `sequential`: DSpark and Domino, slot-by-slot walks;
- `proposal`: a trained corrector as the speculative engine's proposal step;
- `variants`: the trained variants and the path-rule names (plain Python).
Import from the submodules (this file imports nothing, so the name lists stay cheap to read).
"""
