"""Correctors of parallel drafts (docs/algorithms.md "DCOCO"): DCOCO and the sequential baselines DSpark /
Domino ("Baselines and controls").

- `base`: the one corrector interface (`Corrector`: propose, loss, save) that training, validation,
  the engine's proposal step and the checkpoints use for every family; `load_corrector` reads any;
- `dcoco`: the DCOCO transition scorer (docs/algorithms.md "Transition scores"); `paths`: its path rules;
  `loss`: its K² loss;
- `sequential`: DSpark and Domino, slot-by-slot walks;
- `selector`: DFlash-2's candidate selector;
- `proposal`: a trained corrector as the speculative engine's proposal step;
- `family`: the record of a family (`Family`: its classes, settings, variants, budget role, rules, cost, arms), written
  at the end of each family's module; `families`: their registry (built-in modules + `corrector.family_modules`),
  `build_corrector` / `load_corrector`;
- `variants`: a variant's row and the path-rule / loss / base names (plain Python).
Import from the submodules (this file imports nothing, so the name lists stay cheap to read).
"""
